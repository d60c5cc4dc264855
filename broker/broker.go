package broker

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/xrand"
)

// Broker is an in-memory message broker serving the rocketry gRPC services
// (rocketry.v1 MessagingService and ConsumerService) and, on the same
// listener and over the same store, the RocketMQ 5 producer protocol
// (apache.rocketmq.v2 MessagingService), with throttling and injected
// faults for tests. Its methods are safe for concurrent use.
type Broker struct {
	cfg config
	log *slog.Logger
	now func() time.Time
	rng *xrand.Locked

	faults    atomic.Pointer[Faults]
	throttle  *throttler
	sendQueue *sendQueue // nil without WithSendQueue

	topicsMu sync.RWMutex
	topics   map[string]*topic

	stored, duplicates, badRequests, sendRequests atomic.Int64
	sendRequestsV2                                atomic.Int64  // of sendRequests, on apache.rocketmq.v2
	batchSeq                                      atomic.Uint64 // the ids ProxyLocal gives batches
	faultCount                                    [numFaultKinds]atomic.Int64

	stopCh   chan struct{} // closed by Stop
	stopOnce sync.Once
	streams  sync.WaitGroup // the readers of apache.rocketmq.v2 Telemetry streams, the transaction checker

	telemetry     telemetryPeers // the producers' Telemetry streams (rocketmq_tx.go)
	acl           acl            // the apache.rocketmq.v2 face's ACL (rocketmq_acl.go)
	txCheckerOnce sync.Once

	srvMu     sync.Mutex // guards the fields below
	serving   bool
	stopped   bool
	addr      string
	srv       *grpc.Server
	lis       *trackingListener
	serveDone chan struct{}     // closed when the serve loop returns
	pending   bool              // a listener is handed to the serve loop, its server not in srv yet
	next      chan net.Listener // from Restart to the serve loop; buffered
}

// New returns a broker configured by opts, not serving yet: call Start or
// Serve. It returns an error naming the first invalid option.
func New(opts ...Option) (*Broker, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("broker: New: nil Option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	b := &Broker{
		cfg:       cfg,
		log:       cfg.logger,
		throttle:  newThrottler(cfg.throttle, cfg.logger),
		sendQueue: newSendQueue(cfg.sendQueue),
		now:       cfg.clock,
		topics:    map[string]*topic{},
		stopCh:    make(chan struct{}),
		next:      make(chan net.Listener, 1),
	}
	seed := uint64(cfg.seed)
	if !cfg.seeded {
		seed = rand.Uint64()
	}
	b.rng = xrand.New(seed, 0x726f636b65747279)
	b.acl.keys = cfg.acl
	f := cfg.faults
	b.faults.Store(&f)
	for _, name := range cfg.topics {
		b.topics[name] = newTopic(name, cfg.queues, cfg.dedupCount)
	}
	for name, typ := range cfg.topicTypes {
		t := b.topics[name]
		if t == nil {
			t = newTopic(name, cfg.queues, cfg.dedupCount)
			b.topics[name] = t
		}
		t.typ = typ
	}
	return b, nil
}

// Start listens on addr (for example "127.0.0.1:0") and serves in the
// background until Stop. Addr reports the address actually bound.
func (b *Broker) Start(addr string) error {
	if err := b.checkServable(); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("broker: Start: %w", err)
	}
	done, err := b.beginServing(lis)
	if err != nil {
		lis.Close()
		return err
	}
	go func() {
		if err := b.serve(lis, done); err != nil {
			b.log.Error("broker: serve failed", "addr", lis.Addr().String(), "err", err)
		}
	}()
	return nil
}

// Serve serves on lis until Stop, which makes it return nil, or until lis
// fails. A Restart keeps Serve running on a new listener on the same
// address.
func (b *Broker) Serve(lis net.Listener) error {
	done, err := b.beginServing(lis)
	if err != nil {
		return err
	}
	return b.serve(lis, done)
}

func (b *Broker) checkServable() error {
	b.srvMu.Lock()
	defer b.srvMu.Unlock()
	switch {
	case b.stopped:
		return ErrStopped
	case b.serving:
		return ErrServing
	}
	return nil
}

func (b *Broker) beginServing(lis net.Listener) (chan struct{}, error) {
	b.srvMu.Lock()
	defer b.srvMu.Unlock()
	switch {
	case b.stopped:
		return nil, ErrStopped
	case b.serving:
		return nil, ErrServing
	}
	b.serving = true
	b.pending = true
	b.addr = lis.Addr().String()
	b.serveDone = make(chan struct{})
	return b.serveDone, nil
}

// serve runs gRPC servers on lis, then on each listener Restart makes,
// until Stop.
func (b *Broker) serve(lis net.Listener, done chan struct{}) error {
	defer close(done)
	for {
		tl := &trackingListener{Listener: lis, conns: map[string]*trackedConn{}}
		srv := b.newServer()
		b.srvMu.Lock()
		if b.stopped {
			b.srvMu.Unlock()
			lis.Close()
			return nil
		}
		b.srv, b.lis, b.pending = srv, tl, false
		b.srvMu.Unlock()
		if err := srv.Serve(tl); err != nil {
			select {
			case <-b.stopCh:
				return nil
			default:
			}
			return fmt.Errorf("broker: serve: %w", err)
		}
		// Stopped by Stop or Restart.
		select {
		case lis = <-b.next:
		case <-b.stopCh:
			return nil
		}
	}
}

func (b *Broker) newServer() *grpc.Server {
	unary := []grpc.UnaryServerInterceptor{
		recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(b.recovered)),
		b.aclUnary, // apache.rocketmq.v2 only (rocketmq_acl.go)
	}
	if b.log.Enabled(context.Background(), slog.LevelDebug) {
		unary = append(unary, logging.UnaryServerInterceptor(
			logging.LoggerFunc(func(ctx context.Context, l logging.Level, msg string, fields ...any) {
				b.log.Log(ctx, slog.Level(l), msg, fields...)
			}),
			logging.WithLevels(func(codes.Code) logging.Level { return logging.LevelDebug }),
		))
	}
	maxRecv := int(min(int64(b.cfg.maxBody)*int64(b.cfg.maxBatch)+1<<20, math.MaxInt32))
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recovery.WithRecoveryHandlerContext(b.recovered))),
		grpc.MaxRecvMsgSize(maxRecv),
	)
	rocketryv1.RegisterMessagingServiceServer(srv, messagingServer{b: b})
	rocketryv1.RegisterConsumerServiceServer(srv, consumerServer{b: b})
	rocketmqv2.RegisterMessagingServiceServer(srv, rocketmqServer{b: b})
	return srv
}

// recovered turns a panic in a handler into 500 INTERNAL_ERROR.
func (b *Broker) recovered(ctx context.Context, p any) error {
	b.log.Error("broker: panic in a handler", "panic", fmt.Sprint(p))
	return statusError(rocketryv1.Code_CODE_INTERNAL_ERROR, 0, 0, fmt.Sprintf("broker: internal error: %v", p))
}

// Addr returns the address the broker listens on, such as
// "127.0.0.1:34567", or "" before Start or Serve.
func (b *Broker) Addr() string {
	b.srvMu.Lock()
	defer b.srvMu.Unlock()
	return b.addr
}

// Stop stops the broker gracefully: it stops listening, answers the calls
// held by faults (blackholed or delayed) 503 UNAVAILABLE, ends the
// apache.rocketmq.v2 Telemetry streams with UNAVAILABLE, waits a moment
// for the calls in flight, then closes every connection. When Stop returns
// no goroutine of the broker is left. Stop is idempotent; a stopped broker
// does not serve again.
func (b *Broker) Stop() {
	b.stopOnce.Do(func() {
		b.srvMu.Lock()
		b.stopped = true
		close(b.stopCh)
		srv, done := b.srv, b.serveDone
		b.srvMu.Unlock()
		if srv != nil {
			graceful := make(chan struct{})
			go func() {
				srv.GracefulStop()
				close(graceful)
			}()
			t := time.NewTimer(b.cfg.gracePeriod)
			select {
			case <-graceful:
			case <-t.C:
				srv.Stop()
				<-graceful
			}
			t.Stop()
		}
		if done != nil {
			<-done
		}
		b.streams.Wait()
		select {
		case lis := <-b.next:
			lis.Close()
		default:
		}
		b.log.Info("broker: stopped")
	})
}

// Restart stops the listener and closes every connection, as a broker
// process that crashes and comes back does: calls in flight get
// UNAVAILABLE or a dropped connection. Then it listens again on the same
// address. Every stored message, offset and stat is kept.
func (b *Broker) Restart() error {
	b.srvMu.Lock()
	defer b.srvMu.Unlock()
	switch {
	case b.stopped:
		return ErrStopped
	case b.srv == nil && b.pending:
		return nil // the serve loop is about to serve a fresh listener: nothing to restart
	case b.srv == nil:
		return ErrNotServing
	}
	b.srv.Stop()
	b.srv = nil
	lis, err := net.Listen("tcp", b.addr)
	if err != nil {
		b.log.Error("broker: restart failed", "addr", b.addr, "err", err)
		return fmt.Errorf("broker: Restart: listen again on %s: %w", b.addr, err)
	}
	b.next <- lis
	b.pending = true
	b.log.Info("broker: restarted", "addr", b.addr)
	return nil
}

// DropConnections closes every client connection now; the broker keeps
// listening, so clients reconnect.
func (b *Broker) DropConnections() {
	b.srvMu.Lock()
	tl := b.lis
	b.srvMu.Unlock()
	if tl != nil {
		n := tl.closeAll()
		b.log.Info("broker: dropped connections", "count", n)
	}
}

// SetFaults replaces the injected faults. It returns an error naming the
// field, wrapping ErrInvalidFaults, and changes nothing when f is not
// valid (see Faults.Validate).
func (b *Broker) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("broker: SetFaults: %w", err)
	}
	b.faults.Store(&f)
	b.log.Info("broker: faults set", "internal_rate", f.InternalRate, "latency", f.Latency,
		"blackhole_rate", f.BlackholeRate, "drop_rate", f.DropRate, "unavailable", f.Unavailable, "stored_internal_rate", f.StoredInternalRate)
	return nil
}

// SetThrottle replaces the throttling thresholds. It returns an error
// naming the field, wrapping ErrInvalidThrottle, and changes nothing when
// a field is out of range (a negative field, a low-water mark above the
// maximum).
func (b *Broker) SetThrottle(t Throttle) error {
	if err := b.throttle.set(t); err != nil {
		return fmt.Errorf("broker: SetThrottle: %w", err)
	}
	return nil
}

// trackingListener remembers the connections it accepted, by remote
// address, so that the broker can close them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*trackedConn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l, key: c.RemoteAddr().String()}
	l.mu.Lock()
	l.conns[tc.key] = tc
	l.mu.Unlock()
	return tc, nil
}

// closeConn closes the connection from addr; false if there is none.
func (l *trackingListener) closeConn(addr string) bool {
	l.mu.Lock()
	c := l.conns[addr]
	l.mu.Unlock()
	if c == nil {
		return false
	}
	c.Close()
	return true
}

func (l *trackingListener) closeAll() int {
	l.mu.Lock()
	cs := make([]*trackedConn, 0, len(l.conns))
	for _, c := range l.conns {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	return len(cs)
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	key  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.key] == c {
			delete(c.l.conns, c.key)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
