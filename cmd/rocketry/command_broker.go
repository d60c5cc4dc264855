package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rocketry-go/rocketry/broker"
)

// brokerConfig is the flags of "rocketry broker".
type brokerConfig struct {
	listen        string
	queues        int
	throttle      broker.Throttle
	faults        broker.Faults
	seed          uint64
	maxBody       int
	maxBatch      int
	dedupCount    int
	dedupTTL      time.Duration
	noAutoCreate  bool
	topics        string
	topicTypes    topicTypeFlag // --topic NAME=TYPE, repeatable
	statsInterval time.Duration
	logLevel      string
	name          string
	peers         string
	metrics       string // command_broker_metrics.go
	rocketmqDedup bool
	proxyMode     string
	sendQueue     broker.SendQueue
	cert, key     string // --cert, --key: serve TLS
	pidFile       string
	txCheck       time.Duration // --tx-check-interval
	txCheckMax    int           // --tx-check-max
	acl           aclFlag       // --acl ACCESS_KEY:SECRET_KEY, repeatable
}

func brokerFlags(c *brokerConfig) *flag.FlagSet {
	fs := newFlagSet("broker")
	fs.StringVar(&c.listen, "listen", defaultAddr(), "`address` to listen on ($"+addrEnv+", when set, changes the default)")
	fs.IntVar(&c.queues, "queues", broker.DefaultQueues, "queues per topic")
	fs.Int64Var(&c.throttle.MaxBacklog, "max-backlog", 0, "refuse sends (530 BACKLOG) to a topic whose backlog is above this; 0 = off")
	fs.Int64Var(&c.throttle.BacklogLowWater, "backlog-low-water", 0, "accept again at this backlog or under; 0 = 80% of --max-backlog")
	fs.Int64Var(&c.throttle.ColdReadDistance, "cold-read-distance", 0, "a read more than this many messages behind its queue's head is cold; 0 = 1000")
	fs.Float64Var(&c.throttle.MaxStorageLoad, "max-storage-load", 0, "refuse sends (530 STORAGE_LOAD) while cold reads per second are above this; 0 = off")
	fs.DurationVar(&c.throttle.StorageLoadWindow, "storage-load-window", 0, "window the cold-read rate is measured over; 0 = 1s")
	fs.Float64Var(&c.throttle.MaxSendRate, "max-send-rate", 0, "messages per second accepted (530 SEND_RATE over it); 0 = off")
	fs.Float64Var(&c.faults.InternalRate, "internal-rate", 0, "share of sends answered 500 INTERNAL, in [0,1]")
	fs.DurationVar(&c.faults.Latency, "latency", 0, "latency added before answering each send")
	fs.Float64Var(&c.faults.BlackholeRate, "blackhole-rate", 0, "share of sends never answered until the caller's deadline, in [0,1]")
	fs.Float64Var(&c.faults.DropRate, "drop-rate", 0, "share of sends whose connection is closed instead of answering, in [0,1]")
	fs.BoolVar(&c.faults.Unavailable, "unavailable", false, "answer every send 503 UNAVAILABLE")
	fs.Float64Var(&c.faults.StoredInternalRate, "stored-internal-rate", 0, "share of sends stored and then answered INTERNAL all the same (apache.rocketmq.v2: 50001, as a proxy whose answer failed), in [0,1]")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the fault draws (default random)")
	fs.IntVar(&c.maxBody, "max-body-bytes", broker.DefaultMaxBodyBytes, "largest message body stored (413 over it)")
	fs.IntVar(&c.maxBatch, "max-batch", broker.DefaultMaxBatch, "most messages per send request")
	fs.IntVar(&c.dedupCount, "dedup-count", broker.DefaultDedupCount, "message ids remembered per topic for duplicate detection")
	fs.DurationVar(&c.dedupTTL, "dedup-ttl", 0, "how long message ids are remembered; 0 = no time limit")
	fs.BoolVar(&c.noAutoCreate, "no-auto-create", false, "refuse sends to unknown topics (404) instead of creating them")
	fs.StringVar(&c.topics, "topics", "", "comma-separated `topics` to create at start")
	fs.Var(&c.topicTypes, "topic", "create a topic declared with one message type, as `NAME=TYPE` (TYPE: FIFO, NORMAL, DELAY or TRANSACTION); "+
		"a RocketMQ 5 message of another type is refused 40014 (repeatable; other topics take every type)")
	fs.DurationVar(&c.statsInterval, "stats-interval", 10*time.Second, "log a stats line this often, at --log-level debug; 0 = never")
	fs.StringVar(&c.logLevel, "log-level", "", "log level: debug (with a stats line every --stats-interval), info (throttling starts and lifts), warn or error; default error on a terminal, else info")
	fs.StringVar(&c.cert, "cert", "", "PEM `file` of the certificate to serve TLS with (with --key)")
	fs.StringVar(&c.key, "key", "", "PEM `file` of the private key of --cert")
	fs.StringVar(&c.pidFile, "pid-file", "", "write the process id to this `file` while serving (removed at exit): kill \"$(cat FILE)\" stops the broker")
	fs.StringVar(&c.name, "name", "broker-0", "broker `name` of this broker's queues in apache.rocketmq.v2 routes")
	fs.StringVar(&c.peers, "peers", "",
		"other brokers listed in this broker's apache.rocketmq.v2 routes, as `NAME=HOST:PORT[;HOST:PORT...],...` (e.g. broker-1=127.0.0.1:7778; "+
			"several addresses of one broker are separated by ';' as the official clients write them): "+
			"run one process per broker, each with its own --name and the others as --peers, and RocketMQ 5 clients spread "+
			"their sends over all of them (each broker stores its own messages; give every one the same --queues)")
	fs.BoolVar(&c.rocketmqDedup, "rocketmq-dedup", false,
		"answer an apache.rocketmq.v2 message whose id was stored before as stored, instead of storing it again as a RocketMQ broker does (the copies are counted in stats)")
	fs.StringVar(&c.proxyMode, "proxy-mode", "cluster",
		"how apache.rocketmq.v2 sends are answered, as a RocketMQ 5 proxy in this `mode`: cluster (a batch's id is its ids joined by commas; busy is 42900) "+
			"or local (a batch gets a new id; every refusal of the broker, busy included, is 50001)")
	fs.IntVar(&c.sendQueue.Workers, "send-workers", 0,
		"apache.rocketmq.v2 send requests stored at once, each taking --send-service-time, the others waiting in the broker's send queue; 0 = no send queue")
	fs.DurationVar(&c.sendQueue.ServiceTime, "send-service-time", 0, "how long a send worker takes over one request (capacity = --send-workers / this)")
	fs.IntVar(&c.sendQueue.Capacity, "send-queue-capacity", 0, "requests that may wait for a send worker ([OVERLOAD] 42900 beyond); 0 = 10000")
	fs.DurationVar(&c.sendQueue.MaxWait, "send-queue-max-wait", 0,
		"a request waiting this long for a send worker is refused with 42900 [TIMEOUT_CLEAN_QUEUE]broker busy, as a RocketMQ broker does; 0 = 200ms")
	fs.DurationVar(&c.txCheck, "tx-check-interval", broker.DefaultTransactionCheckInterval,
		"a RocketMQ 5 transaction left open this long is checked: its producer is asked over Telemetry, then again every interval")
	fs.IntVar(&c.txCheckMax, "tx-check-max", broker.DefaultTransactionCheckMax,
		"checks of an open transaction before the broker rolls it back, as a RocketMQ broker's transactionCheckMax")
	fs.Var(&c.acl, "acl", "turn on authentication of apache.rocketmq.v2 calls, as a RocketMQ 5 proxy with ACL on: every call must be signed "+
		"(MQv2-HMAC-SHA1) with one of the keys given, as `ACCESS_KEY:SECRET_KEY` (repeatable, or comma-separated); others are refused with 40100 UNAUTHORIZED. "+
		"The secrets are visible to whoever lists the processes: for test brokers only")
	metricsFlag(fs, c)
	return fs
}

// parseProxyMode reads --proxy-mode.
func parseProxyMode(s string) (broker.ProxyMode, error) {
	switch s {
	case "cluster":
		return broker.ProxyCluster, nil
	case "local":
		return broker.ProxyLocal, nil
	}
	return 0, fmt.Errorf("--proxy-mode %q: want cluster or local", s)
}

// checkBrokerName checks a broker name (--name, or a peer's) as the
// broker does: 1 to 255 bytes, no space or control character.
func checkBrokerName(name string) error {
	if name == "" || len(name) > 255 {
		return errors.New("must be 1 to 255 bytes")
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return errors.New("must have no space or control character")
		}
	}
	return nil
}

// parsePeers reads --peers: NAME=HOST:PORT entries, separated by commas,
// a broker's several addresses separated by ';' (NAME=HOST:PORT;HOST:PORT),
// with names and addresses each used once and no name equal to self's.
func parsePeers(s, self string) ([]broker.Peer, error) {
	if s == "" {
		return nil, nil
	}
	var peers []broker.Peer
	names, addrs := map[string]bool{self: true}, map[string]bool{}
	for _, entry := range strings.Split(s, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("--peers %q: entry %q is not NAME=HOST:PORT", s, entry)
		}
		if err := checkBrokerName(name); err != nil {
			return nil, fmt.Errorf("--peers %q: name %q %v", s, name, err)
		}
		all := strings.Split(addr, ";")
		for _, a := range all {
			host, port, err := net.SplitHostPort(a)
			if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("--peers %q: address %q of %s is not HOST:PORT", s, a, name)
			}
			if addrs[a] {
				return nil, fmt.Errorf("--peers %q: address %s given twice", s, a)
			}
			addrs[a] = true
		}
		switch {
		case name == self:
			return nil, fmt.Errorf("--peers %q: %s is this broker's --name; give the other brokers", s, name)
		case names[name]:
			return nil, fmt.Errorf("--peers %q: name %s given twice", s, name)
		}
		names[name] = true
		peers = append(peers, broker.Peer{Name: name, Addr: all[0], Addrs: all[1:]})
	}
	return peers, nil
}

// options turns the flags into broker options; seeded says whether --seed
// was given.
func (c *brokerConfig) options(logger *slog.Logger, seeded bool, peers []broker.Peer, mode broker.ProxyMode) []broker.Option {
	opts := []broker.Option{
		broker.WithRocketMQDedup(c.rocketmqDedup),
		broker.WithProxyMode(mode),
		broker.WithSendQueue(c.sendQueue),
		broker.WithBrokerName(c.name),
		broker.WithQueues(c.queues),
		broker.WithThrottle(c.throttle),
		broker.WithFaults(c.faults),
		broker.WithMaxBodyBytes(c.maxBody),
		broker.WithMaxBatch(c.maxBatch),
		broker.WithDedupWindow(c.dedupCount, c.dedupTTL),
		broker.WithAutoCreateTopics(!c.noAutoCreate),
		broker.WithLogger(logger),
		broker.WithTransactionCheck(c.txCheck, c.txCheckMax),
	}
	if seeded {
		opts = append(opts, broker.WithSeed(int64(c.seed)))
	}
	if c.topics != "" {
		opts = append(opts, broker.WithTopics(strings.Split(c.topics, ",")...))
	}
	if len(peers) > 0 {
		opts = append(opts, broker.WithRoutePeers(func() []broker.Peer { return peers }))
	}
	for _, tt := range c.topicTypes {
		opts = append(opts, broker.WithTopicType(tt.name, tt.typ))
	}
	if c.acl != nil {
		opts = append(opts, broker.WithACL(c.acl))
	}
	return opts
}

// aclFlag is --acl: ACCESS_KEY:SECRET_KEY, repeatable or comma-separated.
type aclFlag map[string]string

// String lists the access keys, never the secrets.
func (f *aclFlag) String() string {
	if f == nil || *f == nil {
		return ""
	}
	keys := make([]string, 0, len(*f))
	for ak := range *f {
		keys = append(keys, ak+":***")
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

func (f *aclFlag) Set(s string) error {
	if *f == nil {
		*f = aclFlag{}
	}
	for kv := range strings.SplitSeq(s, ",") {
		ak, sk, ok := strings.Cut(kv, ":")
		if !ok || ak == "" || sk == "" {
			return errors.New("want ACCESS_KEY:SECRET_KEY, both non-empty")
		}
		(*f)[ak] = sk
	}
	return nil
}

// topicTypeFlag is --topic: NAME=TYPE, once per topic.
type topicTypeFlag []struct {
	name string
	typ  broker.TopicType
}

func (f *topicTypeFlag) String() string {
	if f == nil {
		return ""
	}
	var out []string
	for _, tt := range *f {
		out = append(out, tt.name+"="+tt.typ.String())
	}
	return strings.Join(out, ",")
}

func (f *topicTypeFlag) Set(s string) error {
	name, typName, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q is not NAME=TYPE", s)
	}
	typ, err := broker.ParseTopicType(typName)
	if err != nil {
		return errors.New(cleanError(err))
	}
	*f = append(*f, struct {
		name string
		typ  broker.TopicType
	}{name, typ})
	return nil
}

func runBroker(args []string, stdout, stderr io.Writer) int {
	var c brokerConfig
	fs := brokerFlags(&c)
	if code, ok := parseFlags("broker", fs, args, stdout, stderr); !ok {
		return code
	}
	seeded := false
	fs.Visit(func(f *flag.Flag) { seeded = seeded || f.Name == "seed" })
	var level slog.Level
	if c.logLevel == "" {
		c.logLevel = "info"
		if _, tty := terminalWidth(stderr); tty {
			c.logLevel = "error" // quiet: the listening line says enough
		}
	}
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		fmt.Fprintf(stderr, "rocketry broker: --log-level %q: want debug, info, warn or error\n", c.logLevel)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if c.statsInterval < 0 {
		fmt.Fprintf(stderr, "rocketry broker: --stats-interval %v is negative\n", c.statsInterval)
		return 2
	}
	if err := checkBrokerName(c.name); err != nil {
		fmt.Fprintf(stderr, "rocketry broker: --name %q: %v\n", c.name, err)
		return 2
	}
	peers, err := parsePeers(c.peers, c.name)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry broker: %v\n", err)
		return 2
	}
	mode, err := parseProxyMode(c.proxyMode)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry broker: %v\n", err)
		return 2
	}
	switch {
	case c.txCheck < time.Millisecond:
		fmt.Fprintf(stderr, "rocketry broker: --tx-check-interval %v: must be 1ms or more\n", c.txCheck)
		return 2
	case c.txCheckMax < 1:
		fmt.Fprintf(stderr, "rocketry broker: --tx-check-max %d: must be 1 or more\n", c.txCheckMax)
		return 2
	}
	b, err := broker.New(c.options(logger, seeded, peers, mode)...)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry broker: %s\n", cleanError(err))
		return 2
	}
	ctx, stop := signalContext()
	defer stop()
	addr, code := c.start(b, stderr)
	if code != 0 {
		return code
	}
	defer b.Stop()
	if c.pidFile != "" {
		if err := os.WriteFile(c.pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			fmt.Fprintf(stderr, "rocketry broker: --pid-file %s: %v\n", c.pidFile, err)
			return 2
		}
		defer os.Remove(c.pidFile)
	}
	tlsNote := ""
	if c.cert != "" {
		tlsNote = " (TLS)"
	}
	fmt.Fprintf(stdout, "rocketry broker: listening on %s%s (rocketry.v1, and apache.rocketmq.v2 for RocketMQ 5 clients)\n", addr, tlsNote)
	if len(peers) > 0 {
		route := []string{c.name + " (this one)"}
		for _, p := range peers {
			route = append(route, p.Name+" at "+p.Addr)
		}
		fmt.Fprintf(stdout, "rocketry broker: apache.rocketmq.v2 routes list %s\n", strings.Join(route, ", "))
	}
	logger.Info("broker: listening", "addr", addr, "queues", c.queues)
	stopMetrics, err := serveMetrics(c.metrics, b, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry broker: %s\n", cleanError(err))
		return 2 // an address it cannot listen on is bad input, as --listen's
	}
	defer stopMetrics()

	var tick <-chan time.Time
	if c.statsInterval > 0 {
		t := time.NewTicker(c.statsInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
			logStats(logger, b)
		case <-ctx.Done():
			logger.Info("broker: shutting down")
			b.Stop()
			logStats(logger, b)
			return 0
		}
	}
}

// start serves b on --listen, with TLS when --cert is given, and returns
// the address bound; a status of 2 means the address or the certificate
// was refused (one line on stderr says why).
func (c *brokerConfig) start(b *broker.Broker, stderr io.Writer) (string, int) {
	if (c.cert == "") != (c.key == "") {
		fmt.Fprintf(stderr, "rocketry broker: --cert and --key go together\n")
		return "", 2
	}
	if c.cert == "" {
		if err := b.Start(c.listen); err != nil {
			fmt.Fprintf(stderr, "rocketry broker: --listen %s: %s\n", c.listen, strings.TrimPrefix(cleanError(err), "Start: "))
			return "", 2
		}
		return b.Addr(), 0
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry broker: --cert %s --key %s: %v\n", c.cert, c.key, err)
		return "", 2
	}
	lis, err := tls.Listen("tcp", c.listen, &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"}, // gRPC clients require it (ALPN)
	})
	if err != nil {
		fmt.Fprintf(stderr, "rocketry broker: --listen %s: %s\n", c.listen, cleanError(err))
		return "", 2
	}
	go func() {
		if err := b.Serve(lis); err != nil {
			fmt.Fprintf(stderr, "rocketry broker: serving %s: %s\n", lis.Addr(), cleanError(err))
		}
	}()
	return lis.Addr().String(), 0
}

// logStats logs one line of the broker's stats, at debug level.
func logStats(logger *slog.Logger, b *broker.Broker) {
	s := b.Stats()
	var backlog int64
	for _, t := range s.Topics {
		backlog = max(backlog, t.Backlog)
	}
	logger.Debug("broker: stats",
		"stored", s.Stored, "duplicates", s.Duplicates, "copies", s.Copies, "stored_twice", s.StoredTwice, "send_requests", s.SendRequests, "bad_requests", s.BadRequests,
		"throttled", formatCounts(s.Throttled), "faults", formatCounts(s.Faults),
		"topics", len(s.Topics), "max_backlog", backlog,
		"storage_load", fmt.Sprintf("%.1f", s.StorageLoad), "throttled_storage_load", s.ThrottledStorageLoad)
}
