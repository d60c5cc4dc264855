package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// sendMethod is the full name of MessagingService.SendMessage.
const sendMethod = "/rocketry.v1.MessagingService/SendMessage"

// closedBit marks Producer.state once Close has started; the bits below it
// count the sends in flight.
const closedBit = 1 << 62

// Producer sends messages to a broker, retrying as DESIGN.md's retry
// contract says. It is safe for concurrent use.
type Producer struct {
	cfg       config
	conns     []grpc.ClientConnInterface
	endpoints []string
	owned     []*grpc.ClientConn
	next      atomic.Uint32 // round robin over conns for first attempts
	wd        watchdog      // ends attempts at their timeout
	ids       *idGen
	spool     *Spool

	sem     chan struct{} // one token per async send in flight
	state   atomic.Int64  // closedBit | sends in flight (sync and async)
	closing chan struct{} // closed when Close starts: no new sends

	drained   chan struct{} // closed when no send is in flight after Close started
	drainOnce sync.Once
	abort     chan struct{}           // closed when Close's context ends
	hardCtx   context.Context         // canceled with ErrClosed then
	hardStop  context.CancelCauseFunc //
	closeOnce sync.Once
	closeDone chan struct{}
}

// New returns a Producer for target, which is either
//   - one endpoint "host:port",
//   - a comma-separated list of them, "h1:p1,h2:p2,h3:p3": one connection per
//     endpoint; first attempts go round robin over them, and a retry after a
//     failure goes to the next one, or
//   - a gRPC target with a scheme, such as "dns:///host:port", dialled as
//     one connection.
//
// Connections are insecure unless WithDialOptions says otherwise; they are
// made lazily, so New does not wait for a broker. Every option is validated
// here; an error names the option that is wrong.
func New(target string, opts ...Option) (*Producer, error) {
	cfg, err := build(scopeProducer, "New", opts)
	if err != nil {
		return nil, err
	}
	addrs, err := splitTarget(target)
	if err != nil {
		return nil, err
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, cfg.dialOpts...)
	conns := make([]grpc.ClientConnInterface, 0, len(addrs))
	owned := make([]*grpc.ClientConn, 0, len(addrs))
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, dial...)
		if err != nil {
			for _, c := range owned {
				_ = c.Close()
			}
			return nil, fmt.Errorf("producer: New(%q): %s: %w", target, a, err)
		}
		conns = append(conns, cc)
		owned = append(owned, cc)
	}
	p, err := newProducer(cfg, conns, addrs)
	if err != nil {
		for _, c := range owned {
			_ = c.Close()
		}
		return nil, err
	}
	p.owned = owned
	return p, nil
}

// NewFromConn returns a Producer that sends on cc, which it does not own:
// Close leaves cc open. Options are validated as by New (WithDialOptions has
// no effect).
func NewFromConn(cc grpc.ClientConnInterface, opts ...Option) (*Producer, error) {
	if cc == nil {
		return nil, errors.New("producer: NewFromConn(nil): connection must not be nil")
	}
	cfg, err := build(scopeProducer, "NewFromConn", opts)
	if err != nil {
		return nil, err
	}
	name := ""
	if c, ok := cc.(interface{ Target() string }); ok {
		name = c.Target()
	}
	return newProducer(cfg, []grpc.ClientConnInterface{cc}, []string{name})
}

func newProducer(cfg config, conns []grpc.ClientConnInterface, endpoints []string) (*Producer, error) {
	p := &Producer{
		cfg:       cfg,
		conns:     conns,
		endpoints: endpoints,
		ids:       newIDGen(),
		sem:       make(chan struct{}, cfg.maxInFlight),
		closing:   make(chan struct{}),
		drained:   make(chan struct{}),
		abort:     make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	p.hardCtx, p.hardStop = context.WithCancelCause(context.Background())
	if cfg.spoolPath != "" {
		s, err := OpenSpool(cfg.spoolPath)
		if err != nil {
			return nil, fmt.Errorf("producer: WithSpool(%q): %w", cfg.spoolPath, err)
		}
		if rerr := s.Recovered(); rerr != nil {
			cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "producer: spool repaired on open; damaged bytes saved beside it",
				slog.String("spool", cfg.spoolPath), slog.String("error", rerr.Error()))
		}
		p.spool = s
	}
	return p, nil
}

func splitTarget(target string) ([]string, error) {
	t := strings.TrimSpace(target)
	if t == "" {
		return nil, fmt.Errorf("producer: New(%q): target is empty", target)
	}
	if strings.Contains(t, "://") {
		return []string{t}, nil
	}
	parts := strings.Split(t, ",")
	for i, a := range parts {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("producer: New(%q): endpoint %q is not host:port", target, a)
		}
		parts[i] = a
	}
	return parts, nil
}

// enter counts a send in flight; false once Close has started.
func (p *Producer) enter() bool {
	if p.state.Add(1)&closedBit != 0 {
		p.leave()
		return false
	}
	return true
}

func (p *Producer) leave() {
	if p.state.Add(-1) == closedBit {
		p.drainOnce.Do(func() { close(p.drained) })
	}
}

// Send sends m and blocks until it is stored or the send fails for good;
// it returns a receipt, or an error.
//
// The message is validated first: an invalid one fails with an error
// wrapping ErrInvalidMessage, without any attempt, and is not handed to the
// fallback or spool (it is the caller's to fix). m.ID is set when empty.
// Every later failure is a *SendError (errors.Is tells why: ErrAttemptsExhausted,
// ErrDeadlineTooShort, ErrNotRetryable, ErrRetryBudget, ErrClosed, or ctx's
// error) and the message has been handed to the fallback, else the spool,
// when one is configured (SendError.Spooled). A Send on a closed Producer
// returns ErrClosed.
//
// ctx bounds the whole send; each attempt has its own timeout within it
// (WithAttemptTimeout), and no wait ends after ctx's deadline.
func (p *Producer) Send(ctx context.Context, m *Message) (*SendReceipt, error) {
	if err := p.prepare(m); err != nil {
		return nil, err
	}
	if !p.enter() {
		return nil, ErrClosed
	}
	r, err := p.send(ctx, m)
	p.leave()
	return r, err
}

// SendReceipt says where a message was stored.
type SendReceipt struct {
	// MessageID is the message's ID.
	MessageID string
	// QueueID and Offset are the message's place in the topic.
	QueueID int32
	Offset  int64
	// Duplicate is true when the broker had already stored this ID (an
	// earlier attempt whose answer was lost); QueueID and Offset are then
	// the original's.
	Duplicate bool
	// Attempts is the number of attempts made, counting the first.
	Attempts int
}

// sendCall is everything one send allocates, in one allocation: the
// receipt it returns, the request and the response.
type sendCall struct {
	receipt SendReceipt
	msg     rocketryv1.Message
	ptrs    [1]*rocketryv1.Message
	req     rocketryv1.SendMessageRequest
	resp    rocketryv1.SendMessageResponse
	peer    peer.Peer          // filled by gRPC when the request left the client
	opts    [2]grpc.CallOption // grpc.Peer(&peer), then wait-for-ready or nothing
}

// waitForReady makes an attempt wait for its connection within its timeout.
var waitForReady = grpc.WaitForReady(true)

// prepare validates m and gives it an ID when it has none.
func (p *Producer) prepare(m *Message) error {
	if err := m.validate(p.cfg.maxBody); err != nil {
		return err
	}
	if m.ID == "" {
		m.ID = p.ids.next()
	}
	return nil
}

// send runs one prepared send through the retry loop.
func (p *Producer) send(ctx context.Context, m *Message) (*SendReceipt, error) {
	c := &sendCall{}
	c.msg.MessageId = m.ID
	c.msg.Topic = m.Topic
	c.msg.Tag = m.Tag
	c.msg.Keys = m.Keys
	c.msg.Properties = m.Properties
	c.msg.Body = m.Body
	c.msg.Transactional = m.Transactional
	c.ptrs[0] = &c.msg
	c.req.Messages = c.ptrs[:]

	st := callState{id: m.ID, transactional: m.Transactional, endpoints: p.endpoints}
	if len(p.conns) > 1 {
		st.start = int(p.next.Add(1))
	}
	c.opts[0] = grpc.Peer(&c.peer)
	err := p.cfg.run(ctx, p.abort, &p.wd, &st, func(ctx context.Context, ep int, wait bool) error {
		err := p.attempt(ctx, ep, wait, c)
		st.unsent = err != nil && c.peer.Addr == nil
		return err
	})
	// The receipt keeps c alive: drop the references to the caller's data.
	c.msg.Keys, c.msg.Properties, c.msg.Body = nil, nil, nil
	if err == nil {
		r := c.resp.Results[0]
		c.receipt = SendReceipt{MessageID: m.ID, QueueID: r.GetQueueId(), Offset: r.GetOffset(), Duplicate: r.GetDuplicate(), Attempts: st.attempts}
		c.resp.Results = nil
		return &c.receipt, nil
	}
	se := err.(*SendError)
	p.deadLetter(m, se)
	p.cfg.failed(&st, se)
	return nil, se
}

// attempt makes one attempt on endpoint ep. gRPC fills c.peer only when the
// request left on a transport: an attempt that fails with c.peer empty was
// never sent, so its message is known not stored.
func (p *Producer) attempt(ctx context.Context, ep int, wait bool, c *sendCall) error {
	cc := p.conns[0]
	if len(p.conns) > 1 {
		cc = p.conns[ep%len(p.conns)]
	}
	c.peer = peer.Peer{}
	opts := c.opts[:1]
	if wait {
		opts = append(opts, waitForReady)
	}
	if err := cc.Invoke(ctx, sendMethod, &c.req, &c.resp, opts...); err != nil {
		return err
	}
	if n := len(c.resp.Results); n != 1 {
		return fmt.Errorf("producer: broker answered %d results for one message", n)
	}
	return nil
}

// deadLetter hands a failed message to the fallback, else the spool.
func (p *Producer) deadLetter(m *Message, se *SendError) {
	switch {
	case p.cfg.fallback != nil:
		se.Spooled = true
		p.cfg.fallback(m, se)
	case p.spool != nil:
		rec := SpoolRecord{Message: m, Attempts: se.Attempts, Code: se.Code}
		if se.Cause != nil {
			rec.Err = se.Cause.Error()
		} else {
			rec.Err = se.Error()
		}
		if err := p.spool.Append(rec); err != nil {
			p.cfg.logger.LogAttrs(context.Background(), slog.LevelError, "producer: spool failed; message not kept",
				slog.String("message_id", m.ID), slog.String("error", err.Error()))
			return
		}
		se.Spooled = true
	default:
		return
	}
	if p.cfg.logger.Enabled(context.Background(), slog.LevelWarn) {
		p.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, "producer: dead letter",
			slog.String("message_id", m.ID), slog.Int("attempts", se.Attempts), slog.String("error", se.Error()))
	}
}

// Close stops accepting sends (they fail with ErrClosed), waits for the
// sends in flight, sync and async, to finish, then closes the connections
// New made and the spool.
//
// When ctx ends first, the sends still in flight are cancelled: each ends
// with a *SendError wrapping ErrClosed, its message goes to the fallback or
// spool, and its callback runs; Close waits for that (an attempt on a
// connection given to NewFromConn may run on until its attempt timeout),
// then returns ctx's error. Close may be called more than once; later calls
// wait for the first one within their ctx and return nil.
func (p *Producer) Close(ctx context.Context) error {
	first := false
	p.closeOnce.Do(func() { first = true })
	if !first {
		select {
		case <-p.closeDone:
		case <-ctx.Done():
		}
		return nil
	}
	defer close(p.closeDone)
	close(p.closing)
	if old := p.state.Or(closedBit); old&^closedBit == 0 {
		p.drainOnce.Do(func() { close(p.drained) })
	}
	var err error
	select {
	case <-p.drained:
	case <-ctx.Done():
		err = fmt.Errorf("producer: Close: sends still in flight were cancelled: %w", ctx.Err())
		close(p.abort)
		p.hardStop(ErrClosed)
		p.closeConns()
		<-p.drained
	}
	p.hardStop(ErrClosed)
	if cerr := p.closeConns(); cerr != nil && err == nil {
		err = cerr
	}
	if p.spool != nil {
		if serr := p.spool.Close(); serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// closeConns closes the connections New made, once.
func (p *Producer) closeConns() error {
	var errs []error
	for _, c := range p.owned {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	p.owned = p.owned[:0]
	return errors.Join(errs...)
}
