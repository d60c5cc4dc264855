package producer

import (
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRmqOptions: the RocketMQ 5 options set the config (their invalid
// values are rows of TestBadOptions).
func TestRmqOptions(t *testing.T) {
	t.Parallel()
	tlsCfg := &tls.Config{ServerName: "proxy"}
	cfg, err := build(scopeNew, "New", []Option{WithProtocol(RocketMQ5),
		WithCredentials("ak", "sk", "tok"), WithTLS(tlsCfg), WithNamespace("MQ_INST_1|ns-a%b"), WithServerRetryPolicy(),
	})
	require.NoError(t, err)
	assert.Equal(t, "ak", cfg.rmq.accessKey)
	assert.Equal(t, "sk", cfg.rmq.secretKey)
	assert.Equal(t, "tok", cfg.rmq.securityToken)
	assert.Equal(t, "proxy", cfg.rmq.tls.ServerName)
	assert.NotSame(t, tlsCfg, cfg.rmq.tls, "cloned")
	assert.Equal(t, "MQ_INST_1|ns-a%b", cfg.rmq.namespace)
	assert.True(t, cfg.rmq.serverRetryPolicy)
}
