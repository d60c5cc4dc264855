package broker

import (
	"bufio"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// MetricsContentType is the Content-Type of MetricsHandler's answers: the
// Prometheus text exposition format, version 0.0.4.
const MetricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// MetricsHandler returns an http.Handler that answers every request with
// the broker's metrics (WriteMetrics) in the Prometheus text format, for a
// Prometheus server or a person with curl to scrape while a test or the
// demo runs (`rocketry broker --metrics ADDR`).
func (b *Broker) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", MetricsContentType)
		_ = b.WriteMetrics(w) // an error here is the client's connection
	})
}

// WriteMetrics writes the broker's metrics to w in the Prometheus text
// exposition format (version 0.0.4), every family with its HELP and TYPE:
//
//	rocketry_broker_stored_messages_total               counter
//	rocketry_broker_duplicate_messages_total            counter: refused, the ID was stored already
//	rocketry_broker_copies_stored_total                 counter: stored, the ID was stored already
//	rocketry_broker_ids_stored_twice                    gauge: IDs stored more than once
//	rocketry_broker_bad_request_messages_total          counter
//	rocketry_broker_send_requests_total{protocol}       counter: rocketry.v1, apache.rocketmq.v2
//	rocketry_broker_throttled_messages_total{reason}    counter: BACKLOG, STORAGE_LOAD, SEND_RATE (TIMEOUT_CLEAN_QUEUE, OVERLOAD with a send queue)
//	rocketry_broker_throttling_episodes_total{reason}   counter: spells begun, BACKLOG, STORAGE_LOAD
//	rocketry_broker_throttling{reason}                  gauge: 1 while STORAGE_LOAD throttles
//	rocketry_broker_faults_injected_total{fault}        counter: internal, latency, blackhole, drop, unavailable, stored_internal
//	rocketry_broker_cold_reads_total                    counter
//	rocketry_broker_storage_load                        gauge: cold reads per second, recently
//	rocketry_broker_topic_stored_messages{topic}        gauge
//	rocketry_broker_backlog_messages{topic,group}       gauge: per consumer group
//
// Label values are sorted, so that two scrapes of the same state are
// equal.
func (b *Broker) WriteMetrics(w io.Writer) error {
	s := b.Stats()
	bw := bufio.NewWriter(w)
	m := metricsWriter{w: bw}
	m.family("rocketry_broker_stored_messages_total", "counter", "Messages stored, copies included.")
	m.sample("", s.GetStored())
	m.family("rocketry_broker_duplicate_messages_total", "counter", "Messages refused as duplicates: their ID was stored already.")
	m.sample("", s.GetDuplicates())
	m.family("rocketry_broker_copies_stored_total", "counter", "Messages stored although their ID was stored already (apache.rocketmq.v2 does not deduplicate by default).")
	m.sample("", s.GetCopies())
	m.family("rocketry_broker_ids_stored_twice", "gauge", "Message IDs stored more than once.")
	m.sample("", s.GetStoredTwice())
	m.family("rocketry_broker_bad_request_messages_total", "counter", "Messages refused as invalid (4xx).")
	m.sample("", s.GetBadRequests())
	m.family("rocketry_broker_send_requests_total", "counter", "SendMessage requests received, by protocol.")
	m.sample(labels("protocol", ProtocolRocketMQV2), b.SendRequests(ProtocolRocketMQV2))
	m.sample(labels("protocol", ProtocolRocketryV1), b.SendRequests(ProtocolRocketryV1))
	m.family("rocketry_broker_throttled_messages_total", "counter", "Messages refused for load (530, 42900), by throttle reason.")
	for _, name := range sortedKeys(s.GetThrottled()) {
		m.sample(labels("reason", name), s.GetThrottled()[name])
	}
	m.family("rocketry_broker_throttling_episodes_total", "counter", "Throttling spells begun, by throttle reason (SEND_RATE is a token bucket, without spells).")
	for _, r := range []rocketryv1.ThrottleReason{rocketryv1.ThrottleReason_THROTTLE_REASON_BACKLOG, rocketryv1.ThrottleReason_THROTTLE_REASON_STORAGE_LOAD} {
		m.sample(labels("reason", throttleNames[r]), b.throttle.episodes[r].Load())
	}
	m.family("rocketry_broker_throttling", "gauge", "1 while sends are refused for STORAGE_LOAD, else 0 (BACKLOG throttles per topic).")
	m.sample(labels("reason", "STORAGE_LOAD"), boolValue(s.GetThrottledStorageLoad()))
	m.family("rocketry_broker_faults_injected_total", "counter", "Injected faults that answered a send, by fault.")
	for _, name := range sortedKeys(s.GetFaults()) {
		m.sample(labels("fault", name), s.GetFaults()[name])
	}
	m.family("rocketry_broker_cold_reads_total", "counter", "Messages read from further behind their queue's head than ColdReadDistance.")
	m.sample("", b.throttle.coldTotal.Load())
	m.family("rocketry_broker_storage_load", "gauge", "The recent rate of cold reads, per second.")
	m.float("", s.GetStorageLoad())
	m.family("rocketry_broker_topic_stored_messages", "gauge", "Messages stored in a topic.")
	for _, t := range s.GetTopics() {
		m.sample(labels("topic", t.GetTopic()), t.GetStored())
	}
	m.family("rocketry_broker_backlog_messages", "gauge", "Messages stored and not yet committed by a consumer group.")
	for _, t := range s.GetTopics() {
		for _, g := range t.GetGroups() {
			m.sample(labels("topic", t.GetTopic(), "group", g.GetGroup()), g.GetBacklog())
		}
	}
	return bw.Flush()
}

// metricsWriter writes lines of the text format; bufio keeps the first
// error, which Flush returns.
type metricsWriter struct {
	w    *bufio.Writer
	name string
}

func (m *metricsWriter) family(name, typ, help string) {
	m.name = name
	m.w.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

func (m *metricsWriter) sample(lbl string, v int64) {
	m.w.WriteString(m.name + lbl + " " + strconv.FormatInt(v, 10) + "\n")
}

func (m *metricsWriter) float(lbl string, v float64) {
	m.w.WriteString(m.name + lbl + " " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
}

// labels formats name/value pairs as {a="x",b="y"}, the values escaped as
// the format says (backslash, double quote, line feed).
func labels(kv ...string) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(kv[i] + `="`)
		sb.WriteString(labelEscaper.Replace(kv[i+1]))
		sb.WriteByte('"')
	}
	sb.WriteByte('}')
	return sb.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func boolValue(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
