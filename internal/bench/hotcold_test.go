package bench

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// TestServeHotCold: the server of ShapeHotCold throttles topic "hot" with
// its bucket (1/s, burst 2: two stored, the third refused as the bucket
// shape refuses, 530 SEND_RATE and no RetryInfo) and stores topic "cold"
// always (ten after the bucket ran dry); "stats" counts hot's apart.
func TestServeHotCold(t *testing.T) {
	addr, stats := serveShapeInProcess(t, ShapeHotCold, 1, 2, 0)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	client := rocketryv1.NewMessagingServiceClient(cc)
	send := func(topic, id string) error {
		_, err := client.SendMessage(context.Background(), &rocketryv1.SendMessageRequest{Messages: []*rocketryv1.Message{{MessageId: id, Topic: topic}}})
		return err
	}
	require.NoError(t, send(hotTopic, "h1"))
	require.NoError(t, send(hotTopic, "h2"))
	err = send(hotTopic, "h3")
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "the third hot send: %v", err)
	details := st.Details()
	require.Len(t, details, 1, "details %v; want only the ErrorDetail", details)
	d, ok := details[0].(*rocketryv1.ErrorDetail)
	assert.True(t, ok && d.GetCode() == rocketryv1.Code_CODE_TOO_MANY_REQUESTS && d.GetReason() == rocketryv1.ThrottleReason_THROTTLE_REASON_SEND_RATE,
		"detail %v; want ErrorDetail 530 SEND_RATE", details[0])
	_, isHint := details[0].(*errdetails.RetryInfo)
	assert.False(t, isHint, "a RetryInfo; want none")
	for i := range 10 {
		assert.NoError(t, send(coldTopic, "c"+strconv.Itoa(i)), "cold send %d, the bucket dry", i)
	}
	want := ServerStats{Requests: 13, Stored: 12, Refused: 1, HotRequests: 3, HotStored: 2, HotRefused: 1}
	assert.Equal(t, want, stats())
}

// TestHotColdFigures: the rates come from the counts between the edges
// (cold is stored minus hot's), the alone phases pooled.
func TestHotColdFigures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var e hotColdEdges
	for i, st := range []struct {
		at                 time.Duration
		stored, hotStored  int64
		requests, hotReqs  int64
		refused, hotRefuse int64
	}{
		{0, 100, 0, 100, 0, 0, 0},                           // alone before starts
		{2 * time.Second, 2100, 0, 2100, 0, 0, 0},           // 2,000 cold in 2 s
		{4 * time.Second, 4000, 1000, 4500, 1300, 500, 300}, // 900 cold, 1,000 hot in 2 s
		{4*time.Second + 100*time.Millisecond, 4100, 1000, 4600, 1300, 500, 300},
		{5*time.Second + 100*time.Millisecond, 5300, 1000, 5800, 1300, 500, 300}, // 1,200 cold in 1 s
	} {
		e.stats[i] = ServerStats{Requests: st.requests, Stored: st.stored, Refused: st.refused, HotRequests: st.hotReqs, HotStored: st.hotStored, HotRefused: st.hotRefuse}
		e.at[i] = t0.Add(st.at)
	}
	before := ServerStats{}
	after := ServerStats{Requests: 5900, Stored: 5400, Refused: 500, HotRequests: 1300, HotStored: 1000, HotRefused: 300}
	r := e.figures(before, after, 500)
	assert.Equal(t, int64(2000), r.ColdStoredBefore)
	assert.Equal(t, int64(900), r.ColdStoredBeside)
	assert.Equal(t, int64(1200), r.ColdStoredAfter)
	assert.InDelta(t, 1000, r.AloneBefore, 1e-9)
	assert.InDelta(t, 450, r.Beside, 1e-9)
	assert.InDelta(t, 1200, r.AloneAfter, 1e-9)
	assert.InDelta(t, 3200.0/3, r.Alone, 1e-9, "pooled: (2000+1200)/(2+1) s, not the mean of the rates")
	assert.InDelta(t, 450/(3200.0/3), r.Ratio, 1e-9)
	assert.InDelta(t, 0.1, r.DrainSeconds, 1e-9)
	assert.InDelta(t, 500, r.HotPerSecond, 1e-9)
	assert.InDelta(t, 1.0, r.HotShare, 1e-9)
	assert.InDelta(t, 1.3, r.HotAttemptsPerStored, 1e-9)
	assert.Equal(t, int64(200), r.ColdRefused, "refusals not hot's are cold's")
}

// TestLatHist: the histogram's quantiles are percentileMs's within a
// bucket's width (3%), exact below 64 ns, and 0 when empty.
func TestLatHist(t *testing.T) {
	var l latHist
	assert.Zero(t, l.quantileMs(0.99), "empty")
	var d []time.Duration
	for i := range 10000 {
		v := time.Duration(i*i)*time.Nanosecond + 50*time.Microsecond
		d = append(d, v)
		l.add(v)
	}
	for _, p := range []float64{0, 0.5, 0.9, 0.99, 1} {
		want := percentileMs(slices.Clone(d), p)
		assert.InEpsilon(t, want, l.quantileMs(p), 0.032, "p%v", p)
	}
	var small, other latHist
	for i := range 10 {
		small.add(time.Duration(i))
	}
	other.merge(&small)
	assert.Equal(t, 4e-6, other.quantileMs(0.5), "below 64 ns: exact (0..9 ns: the sample at half of the way, as percentileMs)")
	other.add(time.Hour)
	assert.Equal(t, uint32(1), other[latBuckets-1], "beyond the last bucket: counted in it")
}
