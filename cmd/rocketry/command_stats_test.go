package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
)

func TestStatsCommand(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	b := startFilledBroker(t, 3, broker.WithQueues(1))

	var out, errb bytes.Buffer
	if code := run([]string{"stats", "--addr", b.Addr()}, &out, &errb); code != 0 {
		t.Fatalf("rocketry stats = %d, %q", code, errb.String())
	}
	for _, want := range []string{"stored 3,", "throttled: BACKLOG 0, SEND_RATE 0, STORAGE_LOAD 0", "topic t: 1 queues, stored 3, backlog 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("rocketry stats printed %q; want it to contain %q", out.String(), want)
		}
	}

	out.Reset()
	if code := run([]string{"stats", "--addr", b.Addr(), "--json"}, &out, &errb); code != 0 {
		t.Fatalf("rocketry stats --json = %d, %q", code, errb.String())
	}
	var s statsJSON
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("rocketry stats --json printed %q: %v", out.String(), err)
	}
	if s.Stored != 3 || len(s.Topics) != 1 || s.Topics[0].Stored != 3 || s.Throttled["BACKLOG"] != 0 {
		t.Errorf("rocketry stats --json = %+v; want 3 stored in topic t", s)
	}
}

func TestStatsCommandNoBroker(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	b := startFilledBroker(t, 0, broker.WithQueues(1))
	addr := b.Addr()
	b.Stop()
	var out, errb bytes.Buffer
	if code := run([]string{"stats", "--addr", addr, "--timeout", "200ms"}, &out, &errb); code != 1 || errb.Len() == 0 {
		t.Errorf("rocketry stats of a stopped broker = %d, %q; want 1 and an error", code, errb.String())
	}
}

// TestStatsCommandCopies: an apache.rocketmq.v2 message sent twice is
// stored twice (the faithful face does not deduplicate), and stats shows
// the copy, in text and in JSON, overall and for its topic.
func TestStatsCommandCopies(t *testing.T) {
	leakCheck(t)
	b := brokertest.Start(t)
	c, _ := brokerV2(t, b.Addr())
	v2Send(t, c, "a")
	v2Send(t, c, "a")
	v2Send(t, c, "b")

	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"stats", "--addr", b.Addr()}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "stored 3, duplicates 0,")
	assert.Contains(t, out.String(), "\ncopies 1 (ids stored twice 1)\n")
	assert.Contains(t, out.String(), "topic orders: 4 queues, stored 3, backlog 0, copies 1 (ids stored twice 1)\n")

	out.Reset()
	require.Equal(t, 0, run([]string{"stats", "--addr", b.Addr(), "--json"}, &out, &errb), errb.String())
	var s statsJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &s), out.String())
	assert.Equal(t, int64(1), s.Copies)
	assert.Equal(t, int64(1), s.StoredTwice)
	require.Len(t, s.Topics, 1)
	assert.Equal(t, int64(1), s.Topics[0].Copies)
	assert.Equal(t, int64(1), s.Topics[0].StoredTwice)
	assert.Contains(t, out.String(), `"stored_twice": 1`)
}
