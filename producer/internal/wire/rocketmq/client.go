package wirermq

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/producer/internal/send"
	"github.com/rocketry-go/rocketry/producer/internal/wire"
	"github.com/rocketry-go/rocketry/senderr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// This file holds the RocketMQ 5 client of a Producer: its connections, the
// metadata of every call, its life (start, heartbeats, route refresh,
// close). Its configuration is in config.go, routes in route.go, the
// telemetry stream in telemetry.go, one send's attempts in call.go, the
// transport over it in transport.go.

// The x-mq-* metadata, as the official clients send it.
const (
	rmqHeaderClientID  = "x-mq-client-id"
	rmqHeaderLanguage  = "x-mq-language"
	rmqHeaderProtocol  = "x-mq-protocol"
	rmqHeaderVersion   = "x-mq-client-version"
	rmqHeaderDateTime  = "x-mq-date-time"
	rmqHeaderRequestID = "x-mq-request-id"
	rmqHeaderNamespace = "x-mq-namespace"
	rmqHeaderToken     = "x-mq-session-token"
	rmqHeaderAuth      = "authorization"

	// rmqLanguage is "GO", as the official Go client sends it, not the
	// enum's "GOLANG": a RocketMQ proxy reads the header with Java's
	// LanguageCode.valueOf, whose constant is GO, and fails a heartbeat
	// from any other name (the Node.js client sends "HTTP" for this reason).
	rmqLanguage = "GO"
	// rmqClientVersion is our x-mq-client-version and UA version.
	rmqClientVersion = "rocketry-5.0.0"
	// rmqDateTimeLayout is x-mq-date-time's layout, in UTC.
	rmqDateTimeLayout = "20060102T150405Z"
)

// Intervals of the official clients.
const (
	rmqHeartbeatEvery = 10 * time.Second
	rmqRouteEvery     = 30 * time.Second
	rmqReopenMin      = time.Second // first wait before reopening telemetry
	rmqReopenMax      = 30 * time.Second
)

// Thousands of topics (BENCHMARKS.md, "Thousands of topics").
const (
	// rmqSettingsEvery is the least gap between two writes of the
	// client's Settings after new topics (settingsLoop).
	rmqSettingsEvery = 100 * time.Millisecond
	// rmqSettingsPerTopic lengthens that gap by this much per topic, so
	// that Settings of n topics, O(n) to make and write, are written at
	// most every n×20 µs: 200 ms at 10,000 topics.
	rmqSettingsPerTopic = 20 * time.Microsecond
	// rmqTopicIdle is how long a topic goes unsent before the client drops
	// its route, its pacers and its place in Settings; a later send reads
	// the route again. 15 minutes is 30 route refreshes: a topic sent to
	// less often than that pays one QueryRoute (about a millisecond) per
	// send, and a service that sends to each of its thousands of
	// per-tenant topics now and then keeps only those of the last 15
	// minutes, refreshing no others every 30 s.
	rmqTopicIdle = 15 * time.Minute
	// rmqRefreshWorkers is how many QueryRoute calls a route refresh
	// makes at once: a bound on what a refresh of thousands of topics
	// takes of the connection that sends share, and on its goroutines.
	rmqRefreshWorkers = 4
)

// rmqClient is the RocketMQ 5 side of a Producer: one gRPC connection per
// address it talks to (the access points given to New, and the brokers its
// routes name), a telemetry stream on each, heartbeats, and the routes of
// the topics it sends to. Its methods are safe for concurrent use.
type rmqClient struct {
	cfg         *send.Config // the producer's policy: the retries of EndTransaction and RecallMessage (transaction.go)
	set         Settings
	checked     func(ctx context.Context, c Checked) // Config.Checked
	access      []string                             // access points, host:port
	accessPoint *rocketmqv2.Endpoints
	dialOpts    []grpc.DialOption
	timeout     time.Duration // each unary call; start's wait for Settings
	pacing      bool          // pace brokers that throttle (WithPacing)
	logger      *slog.Logger
	id          string
	ids         *rmqIDGen
	bornHost    string
	now         func() time.Time

	// Intervals; tests shorten them before start.
	heartbeatEvery, routeEvery, reopenMin, reopenMax time.Duration
	settingsEvery                                    time.Duration // least gap between Settings writes (settingsLoop)
	topicIdle                                        time.Duration // a topic unsent this long is dropped (refreshRoutes)
	refreshWorkers                                   int           // QueryRoute calls of a refresh at once
	ua                                               *rocketmqv2.UA

	ctx    context.Context // the client's life; close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the client started

	mu        sync.Mutex
	conns     map[string]*rmqConn
	routes    map[string]*rmqRoute     // by topic; its keys are the topics declared in Settings
	querying  map[string]chan struct{} // QueryRoute in flight, by topic
	nextQuery int                      // access point of the next QueryRoute
	started   bool
	closed    bool

	pacers sync.Map // broker name -> *pace.Pacers; see pacer.go

	maxBody      atomic.Int64 // the server's max_body_size; 0: not known
	policy       atomic.Pointer[rocketmqv2.RetryPolicy]
	settingsCh   chan struct{} // closed at the first Settings from a server
	settingsOnce sync.Once
	telEnded     chan struct{} // a telemetry stream ended (start reads why)

	settingsDirty  chan struct{} // the topics changed (settingsChanged); capacity 1
	settingsWrites atomic.Int64  // Settings written by settingsLoop, for tests
}

// rmqConn is the connection to one address, with its telemetry session.
type rmqConn struct {
	addr  string
	cc    *grpc.ClientConn
	stub  rocketmqv2.MessagingServiceClient
	tel   *rmqTelemetry
	reach send.Reach // of SendMessage calls (internal/send)
}

// newRMQClient makes the client of the access points addrs (host:port
// each) from the producer's configuration: the settings, the dial
// options, the attempt timeout (the request timeout it declares and gives
// each of its own calls) and the logger. It makes no call: start does.
func newRMQClient(addrs []string, cfg Config) (*rmqClient, error) {
	if len(addrs) == 0 {
		return nil, errors.New("producer: rocketmq: no access point")
	}
	ep := &rocketmqv2.Endpoints{}
	kinds := map[rocketmqv2.AddressScheme]bool{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		p, perr := strconv.ParseUint(port, 10, 16)
		if err != nil || perr != nil || host == "" || p == 0 {
			return nil, fmt.Errorf("producer: rocketmq access point %q is not host:port", a)
		}
		ep.Addresses = append(ep.Addresses, &rocketmqv2.Address{Host: host, Port: int32(p)})
		kinds[schemeOf(host)] = true
	}
	ep.Scheme = rocketmqv2.AddressScheme_DOMAIN_NAME
	if len(kinds) == 1 {
		for k := range kinds {
			ep.Scheme = k
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Now
	return &rmqClient{
		cfg:            cfg.Send,
		set:            cfg.Settings,
		checked:        cfg.Checked,
		access:         append([]string(nil), addrs...),
		accessPoint:    ep,
		dialOpts:       cfg.Dial,
		timeout:        cfg.Send.AttemptTimeout,
		pacing:         cfg.Pacing,
		logger:         cfg.Send.Logger,
		id:             newRMQClientID(now()),
		ids:            rmqIDs,
		bornHost:       rmqBornHost(),
		now:            now,
		heartbeatEvery: rmqHeartbeatEvery,
		routeEvery:     rmqRouteEvery,
		reopenMin:      rmqReopenMin,
		reopenMax:      rmqReopenMax,
		settingsEvery:  rmqSettingsEvery,
		topicIdle:      rmqTopicIdle,
		refreshWorkers: rmqRefreshWorkers,
		ua:             userAgent(),
		settingsDirty:  make(chan struct{}, 1),
		ctx:            ctx,
		cancel:         cancel,
		conns:          map[string]*rmqConn{},
		routes:         map[string]*rmqRoute{},
		querying:       map[string]chan struct{}{},
		settingsCh:     make(chan struct{}),
		telEnded:       make(chan struct{}, 1),
	}, nil
}

func schemeOf(host string) rocketmqv2.AddressScheme {
	ip, err := netip.ParseAddr(host)
	switch {
	case err != nil:
		return rocketmqv2.AddressScheme_DOMAIN_NAME
	case ip.Is4():
		return rocketmqv2.AddressScheme_IPv4
	}
	return rocketmqv2.AddressScheme_IPv6
}

// start opens a telemetry stream to every access point, starts the
// heartbeats and route refreshes, and waits until a server has answered
// with its Settings, for the request timeout at most (and within ctx). When
// it fails, the client is stopped: every goroutine has ended.
func (c *rmqClient) start(ctx context.Context) error {
	c.mu.Lock()
	if c.started || c.closed {
		c.mu.Unlock()
		return errors.New("producer: rocketmq client started twice or closed")
	}
	c.started = true
	c.mu.Unlock()
	for _, a := range c.access {
		if _, err := c.conn(a); err != nil {
			c.stop()
			return err
		}
	}
	c.wg.Add(3)
	go c.housekeeping()
	go c.refreshLoop()
	go c.settingsLoop()

	t := time.NewTimer(c.timeout)
	defer t.Stop()
	var err error
	for err == nil {
		select {
		case <-c.settingsCh:
			return nil
		case <-ctx.Done():
			err = fmt.Errorf("producer: rocketmq start: %w", context.Cause(ctx))
		case <-t.C:
			err = fmt.Errorf("producer: rocketmq start: no Settings from %s within %v (%v)",
				strings.Join(c.access, ","), c.timeout, c.telemetryErr())
		case <-c.telEnded:
			if rerr := c.refusal(); rerr != nil {
				err = fmt.Errorf("producer: rocketmq start: %w", rerr) // final: auth.go
			} else if werr := c.unimplemented(); werr != nil {
				err = fmt.Errorf("producer: rocketmq start: %w", werr)
			} else if uerr := c.unreachable(); uerr != nil {
				err = fmt.Errorf("producer: rocketmq start: %w", uerr)
			}
		}
	}
	c.stop()
	return err
}

// accessErrs is the last error of each access point's telemetry stream,
// in the order of the access points; false while one has no connection.
func (c *rmqClient) accessErrs() ([]error, bool) {
	conns := make([]*rmqConn, len(c.access))
	c.mu.Lock()
	for i, a := range c.access {
		conns[i] = c.conns[a]
	}
	c.mu.Unlock()
	errs := make([]error, len(conns))
	for i, cn := range conns {
		if cn == nil {
			return nil, false
		}
		errs[i] = cn.tel.err()
	}
	return errs, true
}

// unreachable is the errors of the access points when none of them could
// be reached (each a *senderr.ConnectError), so that start fails at once and says
// why instead of waiting out its timeout; nil otherwise.
func (c *rmqClient) unreachable() error {
	errs, ok := c.accessErrs()
	if !ok {
		return nil
	}
	for i, err := range errs {
		o := wire.Unreachable(outcome.Outcome{Err: err}, c.access[i])
		if _, ok := o.Err.(*senderr.ConnectError); !ok {
			return nil
		}
		errs[i] = o.Err
	}
	return errors.Join(errs...)
}

// unimplemented is the first access point's UNIMPLEMENTED answer when
// every access point answered its telemetry stream so: servers that do not
// serve apache.rocketmq.v2 at all (the producer names the option to use),
// so that start fails at once; nil otherwise.
func (c *rmqClient) unimplemented() error {
	errs, ok := c.accessErrs()
	if !ok || len(errs) == 0 {
		return nil
	}
	for _, err := range errs {
		if status.Code(err) != codes.Unimplemented {
			return nil
		}
	}
	return errs[0]
}

// telemetryErr is the last error of the access points' telemetry streams.
func (c *rmqClient) telemetryErr() error {
	var errs []error
	for _, cn := range c.connList() {
		if err := cn.tel.err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cn.addr, err))
		}
	}
	if len(errs) == 0 {
		return errors.New("no answer")
	}
	return errors.Join(errs...)
}

// close tells every server the client is going away
// (NotifyClientTermination, each within the request timeout and ctx), then
// stops every goroutine and closes every connection. It returns once all
// have ended; later calls do nothing.
func (c *rmqClient) close(ctx context.Context) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	started := c.started
	c.mu.Unlock()
	if started {
		var wg sync.WaitGroup
		for _, cn := range c.connList() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(c.outgoing(ctx), c.timeout)
				defer cancel()
				_, err := cn.stub.NotifyClientTermination(cctx, &rocketmqv2.NotifyClientTerminationRequest{})
				if err != nil {
					c.logger.Debug("rocketmq: NotifyClientTermination failed", "endpoint", cn.addr, "err", err)
				}
			}()
		}
		wg.Wait()
	}
	c.stop()
}

// stop ends every goroutine and closes every connection.
func (c *rmqClient) stop() {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*rmqConn{}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	for _, cn := range conns {
		_ = cn.cc.Close()
	}
}

// conn returns the connection to addr, making it (and its telemetry
// session, once the client has started) on first use.
func (c *rmqClient) conn(addr string) (*rmqConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, senderr.ErrClosed
	}
	if cn := c.conns[addr]; cn != nil {
		return cn, nil
	}
	opts := c.dialOptions()
	target := wire.Passthrough(addr)
	if strings.Contains(addr, ";") {
		target, opts = multiAddrTarget(addr, opts)
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("producer: rocketmq endpoint %q: %w", addr, err)
	}
	cn := &rmqConn{addr: addr, cc: cc, stub: rocketmqv2.NewMessagingServiceClient(cc)}
	cn.tel = &rmqTelemetry{c: c, conn: cn}
	c.conns[addr] = cn
	c.wg.Add(1)
	go cn.tel.run()
	return cn, nil
}

// dialOptions are the dial options of every connection: the transport
// credentials first, then the keepalive (rmqKeepalive), then the
// producer's own (WithDialOptions), which gRPC applies last, so that a
// WithKeepaliveParams of the user's replaces rmqKeepalive.
func (c *rmqClient) dialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if c.set.TLS != nil {
		creds = credentials.NewTLS(c.set.TLS)
	}
	opts := make([]grpc.DialOption, 0, 2+len(c.dialOpts))
	opts = append(opts, grpc.WithTransportCredentials(creds), rmqKeepalive)
	return append(opts, c.dialOpts...)
}

// rmqKeepalive is the gRPC keepalive of every connection, so that a
// connection whose peer is gone without a word (a half-open TCP
// connection: a host or a middlebox dropped it) is closed, and the next
// call dials again, instead of every call on it waiting out its timeout.
// gRPC-Go sends a ping only after Time without reading anything from the
// connection, and closes the transport when the ping is not acknowledged
// within Timeout: while heartbeats (every 10 s) are answered, it sends
// none.
//
// Its values are the official Java client's: a ping after 5 minutes, 30 s
// for its ack
// (rocketmq-clients' java/client/src/main/java/org/apache/rocketmq/client/java/rpc/RpcClientImpl.java,
// KEEP_ALIVE_TIME_MILLIS: "the grpc server default permitted min keep
// alive is 5min"). The official Go client 5.1.2 sets no keepalive (its
// golang/conn.go dials without one). A RocketMQ 5 proxy sets neither
// permitKeepAliveTime nor permitKeepAliveWithoutCalls on its gRPC server
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/GrpcServerBuilder.java),
// so grpc-java's defaults hold: a client may ping every 5 minutes while a
// call is open, every 2 hours without one (grpc-java's KeepAliveEnforcer,
// whose count the server's own writes reset); a client that pings more
// often is answered GOAWAY too_many_pings. So Time is no shorter than 5
// minutes, and PermitWithoutStream is off (the Java client's
// keepAliveWithoutCalls is on): a started client always has its
// Telemetry stream open, and a ping without a call is one the proxy
// refuses.
var rmqKeepalive = grpc.WithKeepaliveParams(keepalive.ClientParameters{
	Time:    5 * time.Minute,
	Timeout: 30 * time.Second,
})

// multiAddrTarget is the gRPC target and dial options of a broker with
// several addresses (addr: host:port joined by ";", as a route's
// Broker.Endpoints lists them): one connection whose resolver gives every
// address, balanced by gRPC's pick_first, so that an address that refuses
// the connection, or a connection that breaks, is followed by the next
// address instead of failing every send while another proxy node is up.
// This is how the official Java client dials an Endpoints of several
// addresses (rocketmq-clients'
// java/client/src/main/java/org/apache/rocketmq/client/java/route/Endpoints.java:
// one channel over all its socket addresses); the address list is
// shuffled per connection (pick_first's shuffleAddressList), so that
// producers spread over the nodes as the official Go client's random pick
// does (golang/pkg/utils/utils.go SelectAnAddress). WithDialOptions comes
// after, and may replace the service config.
func multiAddrTarget(addr string, opts []grpc.DialOption) (string, []grpc.DialOption) {
	r := manual.NewBuilderWithScheme("rocketry-rmq")
	var st resolver.State
	for a := range strings.SplitSeq(addr, ";") {
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	r.InitialState(st)
	out := make([]grpc.DialOption, 0, len(opts)+2)
	out = append(out, opts[0], grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{"shuffleAddressList":true}}]}`))
	out = append(out, opts[1:]...)
	return r.Scheme() + ":///" + addr, out
}

// connList is a snapshot of the connections.
func (c *rmqClient) connList() []*rmqConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*rmqConn, 0, len(c.conns))
	for _, cn := range c.conns {
		out = append(out, cn)
	}
	return out
}

// outgoing returns ctx with the metadata of one call: client id, language,
// protocol, version, date-time, a new request id, the namespace when set,
// and the signature when credentials are set.
func (c *rmqClient) outgoing(ctx context.Context) context.Context {
	dt := c.now().UTC().Format(rmqDateTimeLayout)
	kv := make([]string, 0, 20)
	kv = append(kv,
		rmqHeaderClientID, c.id,
		rmqHeaderLanguage, rmqLanguage,
		rmqHeaderProtocol, "v2",
		rmqHeaderVersion, rmqClientVersion,
		rmqHeaderDateTime, dt,
		rmqHeaderRequestID, newRequestID(),
	)
	if c.set.Namespace != "" {
		kv = append(kv, rmqHeaderNamespace, c.set.Namespace)
	}
	if c.set.SecurityToken != "" {
		kv = append(kv, rmqHeaderToken, c.set.SecurityToken)
	}
	if c.set.AccessKey != "" {
		kv = append(kv, rmqHeaderAuth, rmqAuthorization(c.set.AccessKey, c.set.SecretKey, dt))
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// rmqAuthorization is the authorization header of a call made at dateTime
// (x-mq-date-time): the HMAC-SHA1 of dateTime keyed with secretKey, in
// upper-case hex, as the Java and Node.js clients write it (a proxy reads
// the hex in either case).
func rmqAuthorization(accessKey, secretKey, dateTime string) string {
	h := hmac.New(sha1.New, []byte(secretKey))
	h.Write([]byte(dateTime))
	sig := strings.ToUpper(hex.EncodeToString(h.Sum(nil)))
	return "MQv2-HMAC-SHA1 Credential=" + accessKey + ", SignedHeaders=" + rmqHeaderDateTime + ", Signature=" + sig
}

// newRequestID returns a random (version 4) UUID.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// housekeeping sends heartbeats until the client stops. Route refreshes
// have their own goroutine (refreshLoop), so that a refresh of thousands
// of topics never delays a heartbeat.
func (c *rmqClient) housekeeping() { c.every(c.heartbeatEvery, c.heartbeat) }

// refreshLoop refreshes the routes every routeEvery until the client
// stops.
func (c *rmqClient) refreshLoop() { c.every(c.routeEvery, c.refreshRoutes) }

// every calls fn every d until the client stops, on the goroutine the
// client counts (c.wg); a call that outlasts d makes the next one skip its
// tick (time.Ticker drops ticks) instead of piling up.
func (c *rmqClient) every(d time.Duration, fn func()) {
	defer c.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// heartbeat sends one Heartbeat to every connection. A server that does
// not know the client (UNRECOGNIZED_CLIENT_TYPE: it lost its Settings) gets
// the Settings again.
func (c *rmqClient) heartbeat() {
	req := &rocketmqv2.HeartbeatRequest{ClientType: rocketmqv2.ClientType_PRODUCER}
	for _, cn := range c.connList() {
		ctx, cancel := context.WithTimeout(c.outgoing(c.ctx), c.timeout)
		resp, err := cn.stub.Heartbeat(ctx, req)
		cancel()
		switch {
		case err != nil:
			c.logger.Debug("rocketmq: heartbeat failed", "endpoint", cn.addr, "err", err)
		case resp.GetStatus().GetCode() == rocketmqv2.Code_UNRECOGNIZED_CLIENT_TYPE:
			cn.tel.sendSettings()
		}
	}
}

// applySettings records what a server's Settings say to a producer: the
// largest body it takes and its retry advice. The first one ends start's
// wait.
func (c *rmqClient) applySettings(s *rocketmqv2.Settings) {
	if n := s.GetPublishing().GetMaxBodySize(); n > 0 {
		c.maxBody.Store(int64(n))
	}
	if p := s.GetBackoffPolicy(); p != nil {
		c.policy.Store(p)
	}
	c.settingsOnce.Do(func() { close(c.settingsCh) })
}

// maxBodySize is the largest body the server takes (its Settings'
// max_body_size), or 0 when no server has said.
func (c *rmqClient) maxBodySize() int { return int(c.maxBody.Load()) }

// serverRetryPolicy is the retry advice of the last server Settings that
// carried one, or nil.
func (c *rmqClient) serverRetryPolicy() *rocketmqv2.RetryPolicy { return c.policy.Load() }
