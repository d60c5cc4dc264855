package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"github.com/rocketry-go/rocketry/senderr"
)

// This file holds RocketMQ 5 transactions and recall. A transaction's
// messages are half messages: the broker stores them invisible to
// consumers until the producer ends the transaction with EndTransaction,
// COMMIT (they are delivered) or ROLLBACK (they are dropped). A transaction
// the producer does not end (it crashed, or its EndTransaction was lost) is
// an orphan: the broker asks a producer of the topic what to do with it,
// a RecoverOrphanedTransactionCommand on the Telemetry stream, and the
// producer answers with EndTransaction, as the official clients do
// (rocketmq-clients' java/client/src/main/java/org/apache/rocketmq/client/java/impl/producer/ProducerImpl.java:
// onRecoverOrphanedTransactionCommand, endTransaction; the Node.js client's
// src/producer/Producer.ts).

// TransactionResolution is what a TransactionChecker says of an orphaned
// transaction.
type TransactionResolution int

const (
	// TransactionUnknown leaves the transaction open: the broker asks
	// again at its next check, and rolls it back after its last.
	TransactionUnknown TransactionResolution = iota
	// TransactionCommit commits it: its message is delivered.
	TransactionCommit
	// TransactionRollback rolls it back: its message is dropped.
	TransactionRollback
)

func (r TransactionResolution) String() string {
	switch r {
	case TransactionUnknown:
		return "UNKNOWN"
	case TransactionCommit:
		return "COMMIT"
	case TransactionRollback:
		return "ROLLBACK"
	}
	return fmt.Sprintf("TransactionResolution(%d)", int(r))
}

// TransactionChecker says whether the transaction of a half message m
// (m.ID, m.Topic, m.Keys, m.Properties and m.Body as sent; Transactional
// set) is to be committed or rolled back, typically from the state of the
// local transaction it stood for. The broker calls it, through the
// producer, for a transaction left open past its check interval. ctx ends
// when the producer is closed; TransactionCheckFrom(ctx) says what the
// broker said of the transaction apart from the message (its ID, the
// properties it added). It may be called concurrently, and more than once
// for the same transaction.
type TransactionChecker func(ctx context.Context, m *Message) TransactionResolution

// TransactionCheck is what the broker said of a transaction it asks a
// TransactionChecker about, apart from the message as sent.
type TransactionCheck struct {
	// TransactionID is the broker's ID of the transaction (a
	// SendReceipt's TransactionID).
	TransactionID string
	// SystemProperties are the properties the broker added to the half
	// message, such as __transactionId__ and TRANSACTION_CHECK_TIMES (how
	// many times it has asked), which a proxy hands back among the user
	// properties: they are taken out of the message's Properties, which
	// are as sent. nil when there are none.
	SystemProperties map[string]string
}

type transactionCheckKey struct{}

// TransactionCheckFrom returns the check that the context of a
// TransactionChecker's call is for; false for any other context.
func TransactionCheckFrom(ctx context.Context) (*TransactionCheck, bool) {
	tc, ok := ctx.Value(transactionCheckKey{}).(*TransactionCheck)
	return tc, ok
}

// WithTransactionChecker sets the checker of orphaned transactions: when a
// RocketMQ 5 server asks about a transaction left open
// (RecoverOrphanedTransactionCommand on the Telemetry stream), the producer
// calls check and answers with EndTransaction (source SOURCE_SERVER_CHECK)
// unless it says TransactionUnknown. Without it the server's questions are
// logged and left unanswered: the broker rolls the transaction back after
// its last check. check must not be nil. Applies to New only, with
// WithProtocol(RocketMQ5).
func WithTransactionChecker(check TransactionChecker) Option {
	return option{"WithTransactionChecker", scopeNew, func(c *config) error {
		if check == nil {
			return invalid("nil", "must not be nil")
		}
		c.rmq.txChecker = check
		return nil
	}}
}

// ErrNotRocketMQ5 is returned by the calls that exist only in RocketMQ 5's
// protocol (BeginTransaction, Recall) on a rocketry.v1 producer. Over
// rocketry.v1 a transactional message is a Message with Transactional set,
// sent by Send.
var ErrNotRocketMQ5 = errors.New("producer: needs WithProtocol(RocketMQ5)")

// ErrTransactionEnded is returned by Send, Commit and Rollback of a
// Transaction already committed or rolled back (or being).
var ErrTransactionEnded = errors.New("producer: transaction already ended")

// ErrTransactionNotFound is wrapped by the error of a commit or a roll
// back the server answered with "no such transaction": it was ended
// already (by an earlier attempt whose answer was lost, or by the broker's
// check, which rolls back an orphan after its last check), or it is not
// the server's.
var ErrTransactionNotFound = senderr.ErrTransactionNotFound

// TransactionError is the error of a step of a Transaction: which step
// (Op: "send", "commit", "rollback"), of which message and transaction,
// and why (Err, which errors.Is and errors.As reach: a *SendError for a
// send, a *RocketMQStatusError, ErrTransactionNotFound or a gRPC error
// for an end).
type TransactionError struct {
	Op            string
	MessageID     string
	TransactionID string // empty when the send did not say
	// Attempts is the number of attempts the step made.
	Attempts int
	// Unresolved is true when the broker may hold the half message in an
	// open transaction that this step could not end (a send whose outcome
	// is unknown, an end never delivered): the broker's check resolves
	// it through the transaction checker (WithTransactionChecker), or
	// rolls it back after its last check.
	Unresolved bool
	Err        error
}

func (e *TransactionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "producer: transaction %s of message %q", e.Op, e.MessageID)
	if e.TransactionID != "" {
		fmt.Fprintf(&b, " (transaction %s)", e.TransactionID)
	}
	fmt.Fprintf(&b, " failed after %d attempt", e.Attempts)
	if e.Attempts != 1 {
		b.WriteString("s")
	}
	b.WriteString(": ")
	b.WriteString(strings.TrimPrefix(fmt.Sprint(e.Err), "producer: "))
	if e.Unresolved {
		if e.Op == "send" {
			b.WriteString("; not retried, since the half message may be stored")
		}
		b.WriteString("; the broker's check resolves the transaction through the transaction checker (WithTransactionChecker), or rolls it back after its last check")
	}
	return b.String()
}

func (e *TransactionError) Unwrap() error { return e.Err }

// Transaction is a RocketMQ 5 transaction: its messages, sent by Send, are
// half messages, invisible to consumers until Commit (then delivered) or
// Rollback (dropped). Each message is its own transaction on the broker:
// Commit and Rollback end them one after another, and an error names the
// ones not ended, which the broker's check resolves through the
// transaction checker. Send may be called from several goroutines; Commit
// and Rollback wait for the sends in flight. A Transaction ends with its
// first Commit or Rollback, whatever the outcome.
type Transaction struct {
	p  *Producer
	tt wire.Transactions // p's transport's (RocketMQ 5's)

	mu      sync.Mutex
	ended   bool
	sending sync.WaitGroup
	halves  []wire.Half // stored half messages, in send order
	unknown []string    // ids of half messages whose send's outcome is unknown
}

// BeginTransaction starts a transaction (RocketMQ 5 only: ErrNotRocketMQ5
// over rocketry.v1). It makes no call; ctx is checked only.
func (p *Producer) BeginTransaction(ctx context.Context) (*Transaction, error) {
	// RocketMQ 5 only: what only it has, by a type assertion on the
	// transport.
	tt, ok := p.tr.(wire.Transactions)
	if !ok {
		return nil, fmt.Errorf("%w: BeginTransaction: over %v a transactional message is a Message with Transactional set, sent by Send", ErrNotRocketMQ5, RocketryV1)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-p.closing:
		return nil, ErrClosed
	default:
	}
	return &Transaction{p: p, tt: tt}, nil
}

// Send sends m as a half message of the transaction; m.Transactional is
// set, and m.ID when empty. m is validated as by Producer.Send, and must
// have no MessageGroup or DeliveryTime.
//
// The retry rule of transactional messages: an attempt is retried only
// when its message is known not stored (throttled, a request that never
// left, an answer that says so), never after an unknown outcome (a
// timeout, a lost connection, a 5xx): the error, a *TransactionError with
// Unresolved set, then says that the broker's check resolves it. A failed
// half message is not handed to the dead-letter sink. The receipt carries
// the broker's TransactionID.
func (tx *Transaction) Send(ctx context.Context, m *Message) (*SendReceipt, error) {
	tx.mu.Lock()
	if tx.ended {
		tx.mu.Unlock()
		return nil, ErrTransactionEnded
	}
	tx.sending.Add(1)
	tx.mu.Unlock()
	defer tx.sending.Done()
	if m == nil {
		return nil, fmt.Errorf("%w: message is nil", ErrInvalidMessage)
	}
	m.Transactional = true
	if err := validate(m, tx.p.cfg.maxBody); err != nil {
		return nil, err
	}
	id, err := tx.p.tr.Prepare(*m)
	if err != nil {
		return nil, explainProtocol(err)
	}
	m.ID = id
	r, addr, se := tx.p.sendHalf(ctx, tx.tt, m)
	if se != nil {
		unresolved := se.Last == FailedUnknown || se.MaybeStoredAt != ""
		if unresolved {
			tx.mu.Lock()
			tx.unknown = append(tx.unknown, m.ID)
			tx.mu.Unlock()
		}
		return nil, &TransactionError{Op: "send", MessageID: m.ID, Attempts: se.Attempts, Unresolved: unresolved, Err: se}
	}
	tx.mu.Lock()
	tx.halves = append(tx.halves, wire.Half{MsgID: m.ID, TxID: r.TransactionID, Topic: m.Topic, Addr: addr})
	tx.mu.Unlock()
	return r, nil
}

// Commit commits the transaction: each half message sent is delivered.
// EndTransaction is retried after failures (it is safe to repeat), by the
// producer's attempts and failure schedule, within ctx. The error joins a
// *TransactionError for each message not committed, and for each message
// whose send had an unknown outcome (the producer has no transaction id to
// end it with): Unresolved says the broker's check resolves it.
//
// Commit counts as a send in flight: Close waits for it before closing
// the connections, and when Close's ctx ends first, cancels it (the error
// wraps ErrClosed). Once Close has started, Commit ends nothing: its error
// wraps ErrClosed (for each message, as above, or alone when there is
// none).
func (tx *Transaction) Commit(ctx context.Context) error {
	return tx.end(ctx, "commit", true)
}

// Rollback rolls the transaction back: no half message sent is delivered.
// Failures are retried and reported, and Close waits for it or refuses it
// with ErrClosed, as by Commit.
func (tx *Transaction) Rollback(ctx context.Context) error {
	return tx.end(ctx, "rollback", false)
}

func (tx *Transaction) end(ctx context.Context, op string, commit bool) error {
	tx.mu.Lock()
	if tx.ended {
		tx.mu.Unlock()
		return ErrTransactionEnded
	}
	tx.ended = true
	tx.mu.Unlock()
	// Counted as a send is, before the wait for the sends: Close waits for
	// the end in flight (and, when its ctx ends first, cancels it with
	// ErrClosed) before it closes the transport; once Close has started,
	// nothing is ended.
	p := tx.p
	entered := p.enter()
	tx.sending.Wait()
	if !entered {
		return tx.closed(op)
	}
	defer p.sends.leave()
	sctx, release := p.sendContext(ctx)
	type ended struct {
		n   int
		err error
	}
	res := make([]ended, len(tx.halves))
	for i, h := range tx.halves {
		n, err := tx.tt.EndTransaction(sctx, h, commit)
		res[i] = ended{n, explainProtocol(err)}
	}
	release()
	p.core.leave() // before the observer and the hook, as a send's end (Producer.end)
	kind := EventCommit
	if !commit {
		kind = EventRollback
	}
	var errs []error
	for i, h := range tx.halves {
		n, err := res[i].n, res[i].err
		if p.cfg.watched() {
			p.cfg.emit(ctx, Event{Kind: kind, MessageID: h.MsgID, Attempt: n, Endpoint: h.Addr, Err: err})
		}
		if err != nil {
			errs = append(errs, &TransactionError{Op: op, MessageID: h.MsgID, TransactionID: h.TxID, Attempts: n,
				Unresolved: !errors.Is(err, ErrTransactionNotFound), Err: err})
		}
	}
	errs = append(errs, tx.unknownErrors(op)...)
	return errors.Join(errs...)
}

// closed is the error of a Commit or Rollback made once Close has started:
// ErrClosed, for each half message not ended (Unresolved: the broker's
// check resolves it), or alone when there is none.
func (tx *Transaction) closed(op string) error {
	var errs []error
	for _, h := range tx.halves {
		errs = append(errs, &TransactionError{Op: op, MessageID: h.MsgID, TransactionID: h.TxID, Unresolved: true, Err: ErrClosed})
	}
	errs = append(errs, tx.unknownErrors(op)...)
	if len(errs) == 0 {
		return ErrClosed
	}
	return errors.Join(errs...)
}

// unknownErrors are the errors of the half messages whose send's outcome
// is unknown: there is no transaction id to end them with.
func (tx *Transaction) unknownErrors(op string) []error {
	var errs []error
	for _, id := range tx.unknown {
		errs = append(errs, &TransactionError{Op: op, MessageID: id, Unresolved: true,
			Err: errors.New("its send's outcome is unknown: no transaction id to end it with")})
	}
	return errs
}

// sendHalf sends a prepared half message: Send's steps (hook, executor,
// cancellation by Close, its ending), without the dead-letter sink. It
// returns the connection that stored it, for EndTransaction.
func (p *Producer) sendHalf(ctx context.Context, tt wire.Transactions, m *Message) (*SendReceipt, string, *SendError) {
	if err := ctx.Err(); err != nil {
		return nil, "", failedBefore(m.ID, err, err, err)
	}
	if !p.enter() {
		return nil, "", failedBefore(m.ID, ErrClosed, nil, ErrClosed)
	}
	defer p.sends.leave()
	ctx, wm := p.startSend(ctx, m, false)
	sctx, release := p.sendContext(ctx)
	wr, addr, f := tt.SendHalf(sctx, *wm)
	release()
	var se *SendError
	if f != nil {
		se = sendError(f)
		addr = ""
	}
	r, _ := p.end(ctx, nil, wr, se)
	return r, addr, se
}
