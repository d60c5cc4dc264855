package wirermq

import (
	"context"
	"crypto/tls"

	"github.com/rocketry-go/rocketry/producer/internal/send"
	"google.golang.org/grpc"
)

// Settings are RocketMQ 5's own options (producer's WithCredentials,
// WithTLS, WithNamespace, WithTransactionChecker). The zero value is an
// anonymous, plaintext client in no namespace that leaves the server's
// transaction checks unanswered.
type Settings struct {
	// AccessKey and SecretKey sign every call (authorization header);
	// both empty: calls are not signed.
	AccessKey, SecretKey string
	// SecurityToken is sent as x-mq-session-token; empty: not sent.
	SecurityToken string
	// TLS is the TLS configuration of every connection; nil: plaintext.
	TLS *tls.Config
	// Namespace is sent as x-mq-namespace and in every Resource; empty:
	// none.
	Namespace string
	// Checker resolves the orphaned transactions the server asks about;
	// nil: they are left to the server.
	Checker Checker
}

// Config is what the client takes of the producer, made once in its New.
type Config struct {
	Settings
	// Dial are the producer's dial options (WithDialOptions), after the
	// client's credentials.
	Dial []grpc.DialOption
	// Send is the producer's policy: its attempt timeout is each unary
	// call's and start's wait for Settings; its attempts, failure
	// schedule and Rand the retries of EndTransaction and RecallMessage;
	// its Logger the client's.
	Send *send.Config
	// Pacing paces the brokers that throttle (WithPacing).
	Pacing bool
	// Checked, when not nil, is told of every answer to a server's
	// transaction check (the producer's EventCommit and EventRollback
	// with Check set).
	Checked func(ctx context.Context, c Checked)
}

// Checked is the answer to a server's transaction check: the message's
// transaction committed (or rolled back) through the connection to
// Endpoint, with Attempts EndTransaction calls, and its error.
type Checked struct {
	Commit    bool
	MessageID string
	Attempts  int
	Endpoint  string
	Err       error
}
