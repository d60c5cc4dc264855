package broker_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
)

// TestWriteMetrics scripts a broker's day (stores, a duplicate, cold
// reads, a BACKLOG spell and a STORAGE_LOAD one, an injected fault, a bad request) and reads it
// back from the metrics, every family with its HELP and TYPE.
func TestWriteMetrics(t *testing.T) {
	b, c := start(t, broker.WithQueues(1), broker.WithClock(newFakeClock().Now),
		broker.WithThrottle(broker.Throttle{MaxBacklog: 10, BacklogLowWater: 5, ColdReadDistance: 2}))
	fill(t, c, "t", "m", 20)
	resp := mustSend(t, c, msg("t", "m-0"))
	require.True(t, resp.GetResults()[0].GetDuplicate())
	require.Len(t, receive(t, c, "t", `g"1\`, 9), 9) // offsets 0-8 of 20: all cold (9 over the 1 s window); backlog 11
	_, err := send(t, c, msg("t", "refused"))
	wantRefusal(t, err, codes.ResourceExhausted, code530, reasonBacklog)
	_, err = send(t, c, msg("", "no-topic"))
	require.Error(t, err)
	require.NoError(t, b.SetThrottle(broker.Throttle{MaxStorageLoad: 5, ColdReadDistance: 2}))
	_, err = send(t, c, msg("t", "refused-too"))
	wantRefusal(t, err, codes.ResourceExhausted, code530, reasonStorage)
	require.NoError(t, b.SetThrottle(broker.Throttle{}))
	require.NoError(t, b.SetFaults(broker.Faults{InternalRate: 1}))
	_, err = send(t, c, msg("t", "faulted"))
	require.Equal(t, codes.Internal, status.Code(err))

	var sb strings.Builder
	require.NoError(t, b.WriteMetrics(&sb))
	assert.Equal(t, `# HELP rocketry_broker_stored_messages_total Messages stored, copies included.
# TYPE rocketry_broker_stored_messages_total counter
rocketry_broker_stored_messages_total 20
# HELP rocketry_broker_duplicate_messages_total Messages refused as duplicates: their ID was stored already.
# TYPE rocketry_broker_duplicate_messages_total counter
rocketry_broker_duplicate_messages_total 1
# HELP rocketry_broker_copies_stored_total Messages stored although their ID was stored already (apache.rocketmq.v2 does not deduplicate by default).
# TYPE rocketry_broker_copies_stored_total counter
rocketry_broker_copies_stored_total 0
# HELP rocketry_broker_ids_stored_twice Message IDs stored more than once.
# TYPE rocketry_broker_ids_stored_twice gauge
rocketry_broker_ids_stored_twice 0
# HELP rocketry_broker_bad_request_messages_total Messages refused as invalid (4xx).
# TYPE rocketry_broker_bad_request_messages_total counter
rocketry_broker_bad_request_messages_total 1
# HELP rocketry_broker_send_requests_total SendMessage requests received, by protocol.
# TYPE rocketry_broker_send_requests_total counter
rocketry_broker_send_requests_total{protocol="apache.rocketmq.v2"} 0
rocketry_broker_send_requests_total{protocol="rocketry.v1"} 6
# HELP rocketry_broker_throttled_messages_total Messages refused for load (530, 42900), by throttle reason.
# TYPE rocketry_broker_throttled_messages_total counter
rocketry_broker_throttled_messages_total{reason="BACKLOG"} 1
rocketry_broker_throttled_messages_total{reason="SEND_RATE"} 0
rocketry_broker_throttled_messages_total{reason="STORAGE_LOAD"} 1
# HELP rocketry_broker_throttling_episodes_total Throttling spells begun, by throttle reason (SEND_RATE is a token bucket, without spells).
# TYPE rocketry_broker_throttling_episodes_total counter
rocketry_broker_throttling_episodes_total{reason="BACKLOG"} 1
rocketry_broker_throttling_episodes_total{reason="STORAGE_LOAD"} 1
# HELP rocketry_broker_throttling 1 while sends are refused for STORAGE_LOAD, else 0 (BACKLOG throttles per topic).
# TYPE rocketry_broker_throttling gauge
rocketry_broker_throttling{reason="STORAGE_LOAD"} 0
# HELP rocketry_broker_faults_injected_total Injected faults that answered a send, by fault.
# TYPE rocketry_broker_faults_injected_total counter
rocketry_broker_faults_injected_total{fault="blackhole"} 0
rocketry_broker_faults_injected_total{fault="drop"} 0
rocketry_broker_faults_injected_total{fault="internal"} 1
rocketry_broker_faults_injected_total{fault="latency"} 0
rocketry_broker_faults_injected_total{fault="stored_internal"} 0
rocketry_broker_faults_injected_total{fault="unavailable"} 0
# HELP rocketry_broker_cold_reads_total Messages read from further behind their queue's head than ColdReadDistance.
# TYPE rocketry_broker_cold_reads_total counter
rocketry_broker_cold_reads_total 9
# HELP rocketry_broker_storage_load The recent rate of cold reads, per second.
# TYPE rocketry_broker_storage_load gauge
rocketry_broker_storage_load 9
# HELP rocketry_broker_topic_stored_messages Messages stored in a topic.
# TYPE rocketry_broker_topic_stored_messages gauge
rocketry_broker_topic_stored_messages{topic="t"} 20
# HELP rocketry_broker_backlog_messages Messages stored and not yet committed by a consumer group.
# TYPE rocketry_broker_backlog_messages gauge
rocketry_broker_backlog_messages{topic="t",group="g\"1\\"} 11
`, sb.String())
}

// TestMetricsHandler: the handler answers with the text format's
// Content-Type and the same text.
func TestMetricsHandler(t *testing.T) {
	b, c := start(t)
	fill(t, c, "orders", "m", 3)
	srv := httptest.NewServer(b.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, broker.MetricsContentType, resp.Header.Get("Content-Type"))
	assert.Contains(t, string(body), "\nrocketry_broker_stored_messages_total 3\n")
	assert.Contains(t, string(body), "\nrocketry_broker_topic_stored_messages{topic=\"orders\"} 3\n")
}
