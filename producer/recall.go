package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"github.com/rocketry-go/rocketry/senderr"
)

// ErrRecallTooLate is wrapped by Recall's error when the message is due
// already (delivered, or about to be): the server refused the recall.
var ErrRecallTooLate = senderr.ErrRecallTooLate

// ErrRecallHandle is wrapped by Recall's error when the server refused the
// handle as invalid: malformed, or of another topic. (A handle of another
// broker is answered as the broker's "service not available", which a
// proxy's 50001 cannot tell from a broker that is down: it is retried.)
var ErrRecallHandle = senderr.ErrRecallHandle

// Recall removes a timed message (Message.DeliveryTime) before its
// delivery time, named by the RecallHandle of its receipt, so that it is
// never delivered; it returns the message's id. RocketMQ 5 only
// (ErrNotRocketMQ5). A message due already (delivered, or about to be) is
// ErrRecallTooLate; a handle the server refuses (malformed, of another
// topic or broker) ErrRecallHandle; both wrap the server's
// *RocketMQStatusError. A handle of a message recalled already is
// answered as a success again, as the broker does. Transport failures and
// throttling are retried as EndTransaction is (recall is safe to repeat),
// on the access points in turn. Close waits for a Recall in flight, as for
// a send (and cancels it when its ctx ends first: ErrClosed); a Recall
// made once Close has started returns ErrClosed.
func (p *Producer) Recall(ctx context.Context, topic, handle string) (string, error) {
	tt, ok := p.tr.(wire.Transactions) // RocketMQ 5 only: what only it has, by a type assertion on the transport
	if !ok {
		return "", fmt.Errorf("%w: Recall: rocketry.v1 has no recall", ErrNotRocketMQ5)
	}
	switch {
	case strings.TrimSpace(topic) == "":
		return "", errors.New("producer: Recall: topic is empty")
	case strings.TrimSpace(handle) == "":
		return "", fmt.Errorf("%w: Recall: recall handle is empty (a receipt's RecallHandle: only a timed message has one)", ErrRecallHandle)
	}
	// Counted as a send is: Close waits for it (and, when its ctx ends
	// first, cancels it with ErrClosed) before it closes the transport.
	if !p.enter() {
		return "", ErrClosed
	}
	defer p.sends.leave()
	sctx, release := p.sendContext(ctx)
	id, at, n, err := tt.Recall(sctx, topic, handle)
	release()
	p.core.leave() // before the observer and the hook, as a send's end (Producer.end)
	if err != nil {
		err = explainProtocol(fmt.Errorf("producer: Recall(%q): %w", topic, err))
	}
	if p.cfg.watched() {
		p.cfg.emit(ctx, Event{Kind: EventRecall, MessageID: id, Attempt: n, Endpoint: at, Err: err})
	}
	if err != nil {
		return "", err
	}
	return id, nil
}
