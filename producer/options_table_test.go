package producer_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// The one table of options: every invalid option (badOptions) is refused
// with an *OptionError naming it by every constructor and call it applies
// to, and every option (anyOptions) given where it does not apply is
// refused with "does not apply to", both without a network call. The
// places are New, NewFromConn, NewUnaryClientInterceptor (and
// UnaryClientInterceptor, which panics with the same error) and
// WithCallOptions on a call through the interceptor.

// sizedSink is a dead-letter sink with a body limit.
type sizedSink struct{ limit int }

func (sizedSink) Put(*producer.DeadLetter) error { return nil }
func (s sizedSink) MaxBodyBytes() int            { return s.limit }

// badOption is a row of badOptions: opts, in order, and what the error of
// a place they all apply to must contain; secret, when set, must not be in
// any error.
type badOption struct {
	name   string
	opts   []producer.Option
	want   string
	secret string
}

func badOptions(t *testing.T) []badOption {
	store, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.db"))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	fallback := func(*producer.Message, error) {}
	one := func(o producer.Option) []producer.Option { return []producer.Option{o} }
	return []badOption{
		{"zero attempts", one(producer.WithMaxAttempts(0)), "WithMaxAttempts(0): must be >= 1", ""},
		{"negative attempts", one(producer.WithMaxAttempts(-3)), "WithMaxAttempts(-3): must be >= 1", ""},
		{"min int attempts", one(producer.WithMaxAttempts(math.MinInt)), "WithMaxAttempts", ""},
		{"zero attempt timeout", one(producer.WithAttemptTimeout(0)), "WithAttemptTimeout(0s): must be > 0", ""},
		{"negative attempt timeout", one(producer.WithAttemptTimeout(-1)), "WithAttemptTimeout(-1ns)", ""},
		{"nil throttle schedule", one(producer.WithThrottleSchedule(nil)), "WithThrottleSchedule(nil)", ""},
		{"nil failure schedule", one(producer.WithFailureSchedule(nil)), "WithFailureSchedule(nil)", ""},
		{"nil policy as a schedule", one(producer.WithThrottleSchedule((*backoff.DeliveryPolicy)(nil))), "WithThrottleSchedule(*backoff.DeliveryPolicy(nil)): must not be nil", ""},
		{"zero connection backoff", one(producer.WithFailureSchedule(&backoff.Connection{})), "WithFailureSchedule(*backoff.Connection): backoff: BaseDelay", ""},
		{"zero rate", one(producer.WithRateLimit(0, 1)), "WithRateLimit(0, 1): perSecond must be > 0", ""},
		{"negative rate", one(producer.WithRateLimit(-5, 1)), "WithRateLimit(-5, 1)", ""},
		{"NaN rate", one(producer.WithRateLimit(math.NaN(), 1)), "WithRateLimit(NaN, 1)", ""},
		{"infinite rate", one(producer.WithRateLimit(math.Inf(1), 1)), "WithRateLimit(+Inf, 1)", ""},
		{"zero burst", one(producer.WithRateLimit(10, 0)), "WithRateLimit(10, 0): burst must be >= 1", ""},
		{"zero in flight", one(producer.WithMaxInFlight(0)), "WithMaxInFlight(0): must be >= 1", ""},
		{"negative in flight", one(producer.WithMaxInFlight(-1)), "WithMaxInFlight(-1)", ""},
		{"nil fallback", one(producer.WithFallback(nil)), "WithFallback(nil)", ""},
		{"zero budget", one(producer.WithRetryBudget(0, 0.1)), "WithRetryBudget(0, 0.1): maxTokens", ""},
		{"budget over 1000", one(producer.WithRetryBudget(1001, 0.1)), "WithRetryBudget(1001, 0.1)", ""},
		{"NaN budget", one(producer.WithRetryBudget(math.NaN(), 0.1)), "WithRetryBudget(NaN, 0.1)", ""},
		{"zero budget ratio", one(producer.WithRetryBudget(10, 0)), "WithRetryBudget(10, 0)", ""},
		{"budget ratio over 1", one(producer.WithRetryBudget(10, 1.5)), "WithRetryBudget(10, 1.5): tokenRatio", ""},
		{"negative body limit", one(producer.WithMaxBodyBytes(-1)), "WithMaxBodyBytes(-1): must be >= 0", ""},
		{"nil logger", one(producer.WithLogger(nil)), "WithLogger(nil)", ""},
		{"nil delivery policy", one(producer.WithDeliveryPolicy(nil)), "WithDeliveryPolicy(nil)", ""},
		{"nil dead-letter sink", one(producer.WithDeadLetterSink(nil)), "WithDeadLetterSink(nil): must not be nil", ""},
		{"nil hook", one(producer.WithHook(nil)), "WithHook(nil)", ""},
		{"nil classifier", one(producer.WithClassifier(nil)), "WithClassifier(nil): must not be nil", ""},
		{"nil resolver", one(producer.WithResolvers(nil)), "WithResolvers(nil)", ""},
		{"nil dial option", one(producer.WithDialOptions(grpc.WithUserAgent("x"), nil)), "WithDialOptions(option 2 of 2 is nil): must not be nil", ""},
		{"batching linger over 1 s", one(producer.WithBatching(2*time.Second, 10, 10)), "WithBatching(2s, 10, 10)", ""},
		{"unknown protocol", one(producer.WithProtocol(producer.Protocol(9))), "must be RocketryV1 or RocketMQ5", ""},
		{"nil TLS", one(producer.WithTLS(nil)), "WithTLS(nil): must not be nil", ""},
		{"credentials without access key", one(producer.WithCredentials("", "s3cret", "")), `WithCredentials("", <secret>, <token>): accessKey and secretKey must not be empty`, "s3cret"},
		{"credentials without secret key", one(producer.WithCredentials("ak", "", "")), "accessKey and secretKey must not be empty", ""},
		{"secret key not printable", one(producer.WithCredentials("ak", "s3\ncret", "")), "must be printable ASCII", "s3\ncret"},
		{"token not printable", one(producer.WithCredentials("ak", "s3cret", "t0ken\x00")), "must be printable ASCII", "t0ken"},
		{"empty namespace", one(producer.WithNamespace("")), `WithNamespace(""): must be 1 to 64`, ""},
		{"namespace with a space", one(producer.WithNamespace("a b")), `WithNamespace("a b"): must be 1 to 64`, ""},
		{"namespace over 64", one(producer.WithNamespace(strings.Repeat("n", 65))), "must be 1 to 64", ""},
		{"RocketMQ 5 option on rocketry.v1", one(producer.WithNamespace("ns")), "WithNamespace applies only with WithProtocol(RocketMQ5), not to New", ""},
		{"nil transaction checker", one(producer.WithTransactionChecker(nil)), "WithTransactionChecker(nil): must not be nil", ""},
		{"fallback and store", []producer.Option{producer.WithFallback(fallback), producer.WithDeadLetterSink(store)}, "excludes WithFallback: set at most one dead-letter sink", ""},
		{"store and fallback", []producer.Option{producer.WithDeadLetterSink(store), producer.WithFallback(fallback)}, "excludes WithDeadLetterSink: set at most one dead-letter sink", ""},
		{"body limit over the store's", []producer.Option{producer.WithDeadLetterSink(store), producer.WithMaxBodyBytes(deadletter.MaxBodyBytes + 1)}, "WithMaxBodyBytes(1073741825): over the dead-letter sink's limit", ""},
		{"default body limit over a sink's", one(producer.WithDeadLetterSink(sizedSink{1 << 20})), "WithMaxBodyBytes(4194304): over the dead-letter sink's limit of 1048576 bytes", ""},
		{"second of two bad options", []producer.Option{producer.WithMaxAttempts(2), producer.WithMaxInFlight(0)}, "WithMaxInFlight(0)", ""},
	}
}

// anyOptions has one value of every option; only where it applies is read.
var anyOptions = []producer.Option{
	producer.WithMaxAttempts(1), producer.WithAttemptTimeout(time.Second),
	producer.WithThrottleSchedule(backoff.Immediate), producer.WithFailureSchedule(backoff.Immediate),
	producer.WithFailoverOnUnknownOutcome(), producer.WithRateLimit(1, 1), producer.WithRand(nil),
	producer.WithMaxInFlight(1), producer.WithObserver(nil), producer.WithHook(nil),
	producer.WithRetryBudget(10, 0.1), producer.WithMaxBodyBytes(1), producer.WithLogger(nil),
	producer.WithDialOptions(), producer.WithDeliveryPolicy(nil), producer.WithClassifier(nil),
	producer.WithPacing(true), producer.WithBatching(0, 0, 0), producer.WithProtocol(producer.RocketMQ5),
	producer.WithCredentials("a", "b", ""), producer.WithTLS(&tls.Config{}), producer.WithNamespace("ns"),
	producer.WithServerRetryPolicy(), producer.WithResolvers(), producer.WithWaitForReady(true),
	producer.WithDeadLetterSink(nil), producer.WithFallback(nil),
	producer.WithTransactionChecker(func(context.Context, *producer.Message) producer.TransactionResolution {
		return producer.TransactionUnknown
	}),
}

// optionPlace is a constructor or call that takes options, named as its
// errors name it.
type optionPlace struct {
	where string
	try   func(opts []producer.Option) error
}

// optionPlaces returns the places, and a count of the calls they made.
func optionPlaces(t *testing.T) ([]optionPlace, func() int) {
	b := brokertest.Start(t)
	cc := &countingConn{}
	var invoked atomic.Int32
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		invoked.Add(1)
		return nil
	}
	closed := func(p *producer.Producer, err error) error {
		if err == nil {
			p.Close(context.Background())
		}
		return err
	}
	places := []optionPlace{
		{"New", func(opts []producer.Option) error {
			return closed(producer.New(b.Addr(), append([]producer.Option{producer.WithProtocol(producer.RocketryV1)}, opts...)...))
		}},
		{"NewFromConn", func(opts []producer.Option) error { return closed(producer.NewFromConn(cc, opts...)) }},
		{"UnaryClientInterceptor", func(opts []producer.Option) error {
			ic, err := producer.NewUnaryClientInterceptor(opts...)
			if err == nil {
				return nil
			}
			if ic != nil {
				return fmt.Errorf("NewUnaryClientInterceptor returned an interceptor with its error %w", err)
			}
			if !assert.PanicsWithError(t, err.Error(), func() { producer.UnaryClientInterceptor(opts...) }) {
				return errors.New("UnaryClientInterceptor did not panic with NewUnaryClientInterceptor's error")
			}
			return err
		}},
		{"WithCallOptions", func(opts []producer.Option) error {
			return producer.UnaryClientInterceptor()(context.Background(), "/rocketry.v1.MessagingService/SendMessage",
				&rocketryv1.SendMessageRequest{}, &rocketryv1.SendMessageResponse{}, nil, invoker, producer.WithCallOptions(opts...))
		}},
	}
	calls := func() int { return int(cc.calls.Load()) + int(invoked.Load()) + int(b.Stats().GetSendRequests()) }
	return places, calls
}

// wantAt is what the error of opts at where must contain: the first option
// that does not apply there is refused, else the row's own error.
func wantAt(where string, opts []producer.Option, want string) string {
	for _, o := range opts {
		if !producer.OptionPlaces(o)[where] {
			return producer.OptionName(o) + " does not apply to " + where
		}
	}
	return want
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	places, calls := optionPlaces(t)
	for _, tt := range badOptions(t) {
		t.Run(tt.name, func(t *testing.T) {
			for _, pl := range places {
				err := noPanic(func() error { return pl.try(tt.opts) })
				want := wantAt(pl.where, tt.opts, tt.want)
				checkClear(t, fmt.Sprintf("%s(%s)", pl.where, tt.name), err, want)
				var oe *producer.OptionError
				assert.True(t, errors.As(err, &oe), "%s(%s) = %v; want an *OptionError", pl.where, tt.name, err)
				if tt.secret != "" && err != nil {
					assert.NotContains(t, err.Error(), tt.secret, "%s(%s): the secret is echoed", pl.where, tt.name)
				}
			}
		})
	}
	assert.Zero(t, calls(), "calls made (connection given to NewFromConn, interceptor's invoker, broker's SendRequests)")
}

// TestOptionScopes: every option given where it does not apply is refused,
// naming it and the place, without a call.
func TestOptionScopes(t *testing.T) {
	t.Parallel()
	places, calls := optionPlaces(t)
	for _, o := range anyOptions {
		for _, pl := range places {
			if producer.OptionPlaces(o)[pl.where] {
				continue
			}
			err := noPanic(func() error { return pl.try([]producer.Option{o}) })
			checkClear(t, fmt.Sprintf("%s(%s)", pl.where, producer.OptionName(o)), err,
				producer.OptionName(o)+" does not apply to "+pl.where)
		}
	}
	assert.Zero(t, calls())
}

// scopeWords is what an option's comment says for each set of places
// (New, NewFromConn, UnaryClientInterceptor, WithCallOptions).
var scopeWords = map[[4]bool]string{
	{true, true, true, true}:    "Applies everywhere.",
	{true, false, false, false}: "Applies to New only",
	{true, true, false, false}:  "Applies to New and NewFromConn.",
	{true, true, true, false}:   "Applies to New, NewFromConn and the interceptor, not per call",
	{false, false, true, true}:  "Applies to the interceptor and per call.",
}

// TestOptionDocsSayScope: each option's comment says where it applies as
// its scope does (the words of scopeWords), and anyOptions has every
// option of the package.
func TestOptionDocsSayScope(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	byName := map[string]producer.Option{}
	for _, o := range anyOptions {
		byName[producer.OptionName(o)] = o
	}
	var seen []string
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "With") || fd.Type.Results == nil ||
				len(fd.Type.Results.List) != 1 || fmt.Sprint(fd.Type.Results.List[0].Type) != "Option" {
				continue
			}
			name := fd.Name.Name
			seen = append(seen, name)
			o, ok := byName[name]
			if !assert.True(t, ok, "%s is not in anyOptions", name) {
				continue
			}
			pl := producer.OptionPlaces(o)
			words, ok := scopeWords[[4]bool{pl["New"], pl["NewFromConn"], pl["UnaryClientInterceptor"], pl["WithCallOptions"]}]
			if !assert.True(t, ok, "%s applies to %v: no words for it in scopeWords", name, pl) {
				continue
			}
			doc := strings.Join(strings.Fields(fd.Doc.Text()), " ")
			assert.Contains(t, doc, words, "the comment of %s", name)
		}
	}
	slices.Sort(seen)
	assert.Len(t, seen, len(byName), "options in the package %v", seen)
}
