package producer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"google.golang.org/grpc"

	"github.com/rocketry-go/rocketry/message"
	"github.com/rocketry-go/rocketry/producer/internal/batch"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	wirev1 "github.com/rocketry-go/rocketry/producer/internal/wire/v1"
)

// Producer sends messages to a broker, retrying by the retry contract (the
// retry table of docs/retries.md; ARCHITECTURE.md draws the executor). It is safe for
// concurrent use.
type Producer struct {
	cfg config
	tr  transport // the wire protocol (transport.go); set before New or NewFromConn returns, never changed

	// sends counts the sends in flight, their fallbacks and callbacks
	// included; core counts the same sends up to their dead-letter
	// hand-off, without the caller's code. Close waits for sends within
	// its context, then for core only, so that a Close called from a
	// callback or fallback still returns when its context ends.
	sends, core tracker
	closing     chan struct{}           // closed when Close starts: no new sends
	hardCtx     context.Context         // every send's context ends with it
	hardStop    context.CancelCauseFunc // with ErrClosed, when Close gives up waiting
	closeOnce   sync.Once
	closeDone   chan struct{}

	async asyncPool
	fifo  sequencer // the order of each message group's sends (fifo.go)
}

// New returns a Producer for target. It speaks RocketMQ 5 unless
// WithProtocol says otherwise: target lists the proxy's access points,
// "host:port", or several separated by "," or by ";" as the official
// clients write them; New starts the client (TLS with WithTLS, signed
// calls with WithCredentials) and returns once a server has answered with
// its Settings, within the attempt timeout. A server that serves rocketry.v1
// only fails it with ErrWrongProtocol.
//
// With WithProtocol(RocketryV1), target is either
//   - one endpoint "host:port",
//   - a comma-separated list of them, "h1:p1,h2:p2,h3:p3": one connection per
//     endpoint; first attempts go round robin over them, and a retry after a
//     failure goes to the next one, or
//   - a gRPC target with a scheme, such as "dns:///brokers:7777" (any
//     scheme a gRPC resolver is registered for, or given with
//     WithResolvers): the producer resolves it and keeps one connection per
//     resolved address, following the resolver's updates, so that the
//     rules above hold for each broker behind the name. A send keeps the
//     addresses it started with for all its attempts; a connection to an
//     address the resolver dropped is closed once no send holds it.
//
// and connections are insecure unless WithDialOptions says otherwise; they
// are made lazily, so New does not wait for a broker (nor for the
// resolver: a send waits for its first answer within its attempt).
//
// Every option is validated here; an error names the option that is
// wrong, and a bad target wraps ErrInvalidTarget.
func New(target string, opts ...Option) (*Producer, error) {
	cfg, err := build(scopeNew, "New", opts)
	if err != nil {
		return nil, err
	}
	if t := strings.TrimSpace(target); wirev1.HasScheme(t) {
		if cfg.protocol == RocketMQ5 {
			return nil, badTarget("producer: New(%q): %v (the default protocol) takes the proxy's access points as host:port[,host:port] (or ;), not a target with a scheme (the brokers come from the proxy's routes); a target with a scheme takes WithProtocol(RocketryV1)", target, RocketMQ5)
		}
		return newResolved(t, cfg)
	}
	// RocketMQ 5's official clients write access points host:port;host:port
	// (rocketmq-clients' golang/pkg/utils/utils.go ParseTarget, Java's
	// route/Endpoints.java): ";" is taken as "," is.
	addrs, err := splitTarget(target, cfg.protocol == RocketMQ5)
	if err != nil {
		return nil, err
	}
	if cfg.protocol == RocketMQ5 {
		return newRocketMQ(target, cfg, addrs)
	}
	p := newProducer(cfg)
	tr, err := wirev1.New(target, addrs, cfg.v1DialOptions(), p.env())
	if err != nil {
		p.abandon()
		return nil, err
	}
	p.tr = tr
	return p, nil
}

// newResolved makes the Producer of a target with a scheme
// (producer/internal/wire/v1, targets.go).
func newResolved(target string, cfg config) (*Producer, error) {
	p := newProducer(cfg)
	tr, err := wirev1.NewResolved(target, cfg.resolvers, cfg.v1DialOptions(), p.env())
	if err != nil {
		p.abandon()
		return nil, explainProtocol(err)
	}
	p.tr = tr
	return p, nil
}

// NewFromConn returns a Producer that sends on cc, which it does not own:
// Close leaves cc open. Options are validated as by New; WithDialOptions is
// refused, since cc is already dialled.
func NewFromConn(cc grpc.ClientConnInterface, opts ...Option) (*Producer, error) {
	if cc == nil {
		return nil, errors.New("producer: NewFromConn(nil): connection must not be nil")
	}
	cfg, err := build(scopeFromConn, "NewFromConn", opts)
	if err != nil {
		return nil, err
	}
	p := newProducer(cfg)
	p.tr = wirev1.NewFromConn(cc, p.env())
	return p, nil
}

// newProducer makes a Producer without its transport, which its
// constructor sets before returning it (for RocketMQ 5, once its client
// has started).
func newProducer(cfg config) *Producer {
	p := &Producer{
		cfg:       cfg,
		closing:   make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	p.sends.init()
	p.core.init()
	p.async.init(cfg.maxInFlight)
	hard, hardStop := context.WithCancelCause(context.Background())
	// Attempts of sends on it (the callers' context.Background) share their
	// deadlines' timers (send.AttemptContext).
	p.hardCtx, p.hardStop = send.NewShared(hard), hardStop
	p.async.batch = batch.New(cfg.batch, p.async.slots, p.hardCtx)
	return p
}

// abandon ends what newProducer started, for a constructor that fails
// after it: no send has been made.
func (p *Producer) abandon() {
	p.hardStop(ErrClosed)
	p.async.stop(true)
}

// splitTarget splits a host:port list at ",", and at ";" too when
// semicolon is set.
func splitTarget(target string, semicolon bool) ([]string, error) {
	t := strings.TrimSpace(target)
	if t == "" {
		return nil, badTarget("producer: New(%q): target is empty", target)
	}
	if semicolon {
		t = strings.ReplaceAll(strings.TrimSuffix(t, ";"), ";", ",") // "a;b;" as the official clients read it
	}
	parts := strings.Split(t, ",")
	for i, a := range parts {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, badTarget("producer: New(%q): endpoint %q is not host:port", target, a)
		}
		parts[i] = a
	}
	return parts, nil
}

// leave uncounts a send that enter counted and that ends before its
// attempts (refused).
func (p *Producer) leave() {
	p.core.leave()
	p.sends.leave()
}

// enter counts a send in flight; false once Close has started.
func (p *Producer) enter() bool {
	if !p.sends.enter() {
		return false
	}
	if !p.core.enter() {
		p.sends.leave()
		return false
	}
	return true
}

// Send sends m and blocks until it is stored or the send fails for good;
// it returns a receipt, or an error. When ctx has already ended, Send
// returns ctx's error without an attempt, as SendAsync does.
//
// The message is validated first: an invalid one fails with an error
// wrapping ErrInvalidMessage, without any attempt, and is not handed to the
// dead-letter sink (it is the caller's to fix). m.ID is set when empty.
// Every later failure is a *SendError (errors.Is tells why: ErrAttemptsExhausted,
// ErrDeadlineTooShort, ErrNotRetryable, ErrRetryBudget, ErrClosed, or ctx's
// error) and the message has been handed to the dead-letter sink
// (WithDeadLetterSink, WithFallback), when one is configured
// (SendError.DeadLettered). A Send on a closed Producer
// returns ErrClosed.
//
// ctx bounds the whole send; each attempt has its own timeout within it
// (WithAttemptTimeout), and no wait ends after ctx's deadline.
func (p *Producer) Send(ctx context.Context, m *Message) (*SendReceipt, error) {
	return p.sendSync(ctx, m, "")
}

// sendSync is Send; with maybeAt, every attempt goes where the message may
// be stored (Resend).
func (p *Producer) sendSync(ctx context.Context, m *Message, maybeAt string) (*SendReceipt, error) {
	if err := p.prepare(m); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.sends.leave()
	var t *ticket
	inCore := true   // until end leaves core
	started := false // the hook's StartSend returned: its EndSend is owed
	defer func() {
		if inCore {
			p.unwound(ctx, m, t, started)
		}
	}()
	var pn *send.Pin
	if maybeAt != "" {
		var err error
		if pn, err = p.pinFor(ctx, m, maybeAt); err != nil {
			return nil, err
		}
	}
	if m.MessageGroup != "" {
		t, _ = p.fifo.take(m)
	}
	ctx, wm := p.startSend(ctx, m, false)
	started = true
	var r *SendReceipt
	var se *SendError
	if t == nil {
		r, se = p.send(ctx, m, wm, nil, pn)
	} else if se = p.awaitTurn(ctx, m, t); se == nil {
		r, se = p.sendInTurn(ctx, m, wm, t, pn)
	}
	inCore = false
	return p.end(ctx, m, r, se)
}

// errUnwound is the failure of a sync send that a panic in the caller's
// own code (an Observer, a Hook, a sink) unwound: its outcome is unknown.
var errUnwound = errors.New("producer: a panic in an Observer, a Hook or a sink unwound the send; the message may or may not be stored")

// unwound leaves core for a sync send that did not reach its end (an
// error before any attempt, or a panic unwinding it), so that Close does
// not wait for it; ends its FIFO ticket, if it holds one its group waits
// on (the group's sends behind it fail, as behind any failure whose
// outcome the caller did not learn); and, once the hook's StartSend has
// returned (started), gives the hook its EndSend, so that a span ends.
func (p *Producer) unwound(ctx context.Context, m *Message, t *ticket, started bool) {
	p.core.leave()
	if t == nil && !started {
		return
	}
	se := failedBefore(m.ID, ErrNotRetryable, nil, errUnwound)
	if t != nil {
		if j := p.fifo.abandon(t, se); j != nil {
			p.async.submit(p, *j)
		}
	}
	if started {
		p.endSend(ctx, nil, se)
	}
}

// end is the one ending of a send that ran, sync (sendSync), async
// (runAsync) or a transaction's half (sendHalf): it leaves core, hands a
// failed message to the fallback (handOff; a half, m nil, has none),
// reports the send's end to the hook, and returns what the caller is
// given, the receipt or the *SendError (a nil error when the message was
// stored). The caller then leaves sends, after its callback for an async
// send.
func (p *Producer) end(ctx context.Context, m *Message, r *SendReceipt, se *SendError) (*SendReceipt, error) {
	p.core.leave()
	if se != nil {
		if m != nil {
			p.handOff(ctx, m, se)
		} else {
			p.cfg.finish(ctx, se)
		}
		p.endSend(ctx, nil, se)
		return nil, se
	}
	p.endSend(ctx, r, nil)
	return r, nil
}

// SendReceipt says where a message was stored. It is message.Receipt
// (package github.com/rocketry-go/rocketry/message, which documents its
// fields), as the wire protocols make it.
type SendReceipt = message.Receipt

// prepare validates m and gives it an ID when it has none.
func (p *Producer) prepare(m *Message) error {
	if err := validate(m, p.cfg.maxBody); err != nil {
		return err
	}
	if err := p.tr.Refuse(*m); err != nil {
		return explainProtocol(err)
	}
	id, err := p.tr.Prepare(*m)
	if err != nil {
		return explainProtocol(err)
	}
	m.ID = id
	return nil
}

// send runs one prepared send through the executor; wm is what goes on the
// wire (m, or a copy with a hook's properties). It ends with the dead letter
// kept, when the send failed and there is a sink; the fallback is the
// caller's (handOff), after core.leave. With bt, the send's first attempt
// joins a batch (batch.go); with pn, every attempt goes to the endpoint
// where the message may be stored (Resend).
func (p *Producer) send(ctx context.Context, m, wm *Message, bt *batch.Batcher, pn *send.Pin) (*SendReceipt, *SendError) {
	sctx, release := p.sendContext(ctx)
	defer release() // on a panic in an Observer too: its AfterFunc would stay until Close
	r, f := p.tr.Send(sctx, *wm, bt, pn)
	if f == nil {
		return r, nil
	}
	se := sendError(f)
	p.putDeadLetter(m, se)
	return nil, se
}

// sendContext is the one cancellation path of a send's attempts: their
// context ends with the caller's ctx, or with ErrClosed when Close gives
// up waiting; release it when the attempts are over. A caller's
// context.Background() can never end and carries nothing: the attempts
// then run on the hard-stop context itself, which costs nothing and
// shares their deadlines' timers (send.Shared).
func (p *Producer) sendContext(ctx context.Context) (sctx context.Context, release func()) {
	if ctx == context.Background() {
		return p.hardCtx, func() {}
	}
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(p.hardCtx, func() { cancel(ErrClosed) })
	return c, func() {
		stop()
		cancel(nil)
	}
}

// Close stops accepting sends (they fail with ErrClosed), waits for the
// sends in flight, sync and async, to finish (their fallbacks and callbacks
// included), then stops the async workers and closes the connections New
// made. It does not close the dead-letter sink, which is the caller's:
// close it after Close returns.
//
// When ctx ends first, the sends still in flight are cancelled: each ends
// with a *SendError wrapping ErrClosed, its message goes to the dead-letter
// sink, and its callback runs. Close waits until every send has
// finished its attempts and WithDeadLetterSink's Put has returned (cancelled attempts end at
// once), not for fallbacks and callbacks still running, so that a Close
// called from one of them returns; it then returns ctx's error. Close may
// be called more than once; later calls wait for the first one within
// their ctx: nil once it has returned, else ctx's error.
func (p *Producer) Close(ctx context.Context) error {
	first := false
	p.closeOnce.Do(func() { first = true })
	if !first {
		select {
		case <-p.closeDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("producer: Close: the first Close has not returned: %w", ctx.Err())
		}
	}
	defer close(p.closeDone)
	close(p.closing)
	p.sends.close()
	p.core.close()
	var err error
	select {
	case <-p.sends.done:
		p.async.stop(true)
	case <-ctx.Done():
		err = fmt.Errorf("producer: Close: sends still in flight were cancelled: %w", ctx.Err())
		p.hardStop(ErrClosed)
		<-p.core.done
		p.async.stop(false)
	}
	p.hardStop(ErrClosed)
	// RocketMQ 5's NotifyClientTermination, then every goroutine and
	// connection of the transport ends.
	if cerr := p.tr.Close(ctx, p.cfg.AttemptTimeout); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
