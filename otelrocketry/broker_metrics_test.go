package otelrocketry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/rocketry-go/rocketry/backoff"
	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dto "github.com/prometheus/client_model/go"
)

// TestBrokerMetricsParse scrapes the broker's metrics handler, written by
// hand in the broker package, and parses it with Prometheus's own decoder
// (strict metric names, the Content-Type's format): every family once,
// typed, with its samples.
func TestBrokerMetricsParse(t *testing.T) {
	b := throttleOnce(t) // two stored over rocketry.v1, group "billing" 2 behind
	r := newRig(t, b.Addr(), producer.WithProtocol(producer.RocketMQ5),
		producer.WithThrottleSchedule(backoff.Constant(5*time.Millisecond)))
	_, err := r.p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, b.SetFaults(broker.Faults{InternalRate: 1}))
	_, err = r.p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("y")})
	require.Error(t, err)

	srv := httptest.NewServer(b.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	format := expfmt.ResponseFormat(resp.Header)
	require.Equal(t, expfmt.TypeTextPlain, format.FormatType(), "Content-Type %q", resp.Header.Get("Content-Type"))

	fams := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(resp.Body, format)
	for {
		var f dto.MetricFamily
		err := dec.Decode(&f)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.NotContains(t, fams, f.GetName(), "family %s twice", f.GetName())
		fams[f.GetName()] = &f
	}

	// value is the sample of family name whose labels include want.
	value := func(name string, typ dto.MetricType, want map[string]string) float64 {
		t.Helper()
		f := fams[name]
		require.NotNil(t, f, "family %s", name)
		require.Equal(t, typ, f.GetType(), name)
		require.NotEmpty(t, f.GetHelp(), name)
	metrics:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			if typ == dto.MetricType_COUNTER {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
		t.Fatalf("%s has no sample with labels %v", name, want)
		return 0
	}
	counter, gauge := dto.MetricType_COUNTER, dto.MetricType_GAUGE
	assert.Equal(t, 3.0, value("rocketry_broker_stored_messages_total", counter, nil))
	assert.Equal(t, 0.0, value("rocketry_broker_duplicate_messages_total", counter, nil))
	assert.Equal(t, 1.0, value("rocketry_broker_throttled_messages_total", counter, map[string]string{"reason": "BACKLOG"}))
	assert.Equal(t, 1.0, value("rocketry_broker_throttling_episodes_total", counter, map[string]string{"reason": "BACKLOG"}))
	assert.Equal(t, 0.0, value("rocketry_broker_throttling_episodes_total", counter, map[string]string{"reason": "STORAGE_LOAD"}))
	assert.Equal(t, 3.0, value("rocketry_broker_faults_injected_total", counter, map[string]string{"fault": "internal"}), "the failed send's 3 attempts")
	assert.Equal(t, 0.0, value("rocketry_broker_cold_reads_total", counter, nil))
	assert.Equal(t, 1.0, value("rocketry_broker_send_requests_total", counter, map[string]string{"protocol": "rocketry.v1"}))
	assert.Equal(t, 5.0, value("rocketry_broker_send_requests_total", counter, map[string]string{"protocol": "apache.rocketmq.v2"}))
	assert.Equal(t, 3.0, value("rocketry_broker_backlog_messages", gauge, map[string]string{"topic": "orders", "group": "billing"}))
	assert.Equal(t, 3.0, value("rocketry_broker_topic_stored_messages", gauge, map[string]string{"topic": "orders"}))
	assert.Equal(t, 0.0, value("rocketry_broker_storage_load", gauge, nil))
	assert.Equal(t, 0.0, value("rocketry_broker_throttling", gauge, map[string]string{"reason": "STORAGE_LOAD"}))
	assert.Equal(t, 0.0, value("rocketry_broker_copies_stored_total", counter, nil))
	assert.Equal(t, 0.0, value("rocketry_broker_ids_stored_twice", gauge, nil))
	assert.Len(t, fams, 14)
}
