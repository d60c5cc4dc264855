package broker

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// TestSettingsOfManyTopics: the answer to a producer's Settings of
// thousands of topics shares their Resources instead of copying them, and
// leaves the client's Settings as they were; the topics a stream
// publishes are a set that pick reads without a scan.
func TestSettingsOfManyTopics(t *testing.T) {
	b, err := New()
	require.NoError(t, err)
	st := &rocketmqv2.Settings{ClientType: rocketmqv2.ClientType_PRODUCER.Enum(), PubSub: &rocketmqv2.Settings_Publishing{Publishing: &rocketmqv2.Publishing{}}}
	for i := range 5000 {
		st.GetPublishing().Topics = append(st.GetPublishing().Topics, &rocketmqv2.Resource{Name: fmt.Sprintf("t%d", i)})
	}
	before := proto.Clone(st)
	ans := b.settingsFor(st)
	assert.True(t, proto.Equal(before, st), "the client's Settings are unchanged")
	require.Len(t, ans.GetPublishing().GetTopics(), 5000)
	assert.Same(t, st.GetPublishing().GetTopics()[0], ans.GetPublishing().GetTopics()[0], "shared, not copied")
	assert.Equal(t, int32(b.cfg.maxBody), ans.GetPublishing().GetMaxBodySize())

	var peers telemetryPeers
	p := &telemetryPeer{client: "a", topics: publishedTopics(st)}
	other := &telemetryPeer{client: "b"}
	peers.add(p)
	peers.add(other)
	assert.Len(t, p.topics, 5000)
	assert.Same(t, p, peers.pick("c", "t4999"))
	peers.update(p, &rocketmqv2.Settings{PubSub: &rocketmqv2.Settings_Publishing{Publishing: &rocketmqv2.Publishing{
		Topics: []*rocketmqv2.Resource{{Name: "x"}},
	}}})
	assert.Len(t, p.topics, 1)
	assert.Same(t, p, peers.pick("c", "x"))
}
