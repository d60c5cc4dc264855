package producer

import "errors"

// ErrInvalidMessage is returned, wrapped with what is wrong, when a message
// fails validation (nil, empty topic, body over the limit); no attempt is
// made.
var ErrInvalidMessage = errors.New("producer: invalid message")
