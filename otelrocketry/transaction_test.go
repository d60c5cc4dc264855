package otelrocketry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/otelrocketry"
	"github.com/rocketry-go/rocketry/producer"
)

// TestTransactionAndRecallEvents: a transaction's half message is a send
// span of its own; its commit and a recall are events on the caller's
// span.
func TestTransactionAndRecallEvents(t *testing.T) {
	b := brokertest.Start(t)
	r := newRig(t, b.Addr(), producer.WithProtocol(producer.RocketMQ5))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, caller := tp.Tracer("test").Start(context.Background(), "checkout")
	tx, err := r.p.BeginTransaction(ctx)
	require.NoError(t, err)
	m := &producer.Message{Topic: "orders", Body: []byte("x")}
	_, err = tx.Send(ctx, m)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	rc, err := r.p.Send(ctx, &producer.Message{Topic: "orders", Body: []byte("later"), DeliveryTime: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = r.p.Recall(ctx, "orders", rc.RecallHandle)
	require.NoError(t, err)
	caller.End()

	var names []string
	for _, s := range r.spans.Ended() {
		if s.Name() != "checkout" {
			continue
		}
		for _, e := range s.Events() {
			names = append(names, e.Name)
			if e.Name == otelrocketry.EventCommit {
				assert.Equal(t, m.ID, attr(e.Attributes, "messaging.message.id"))
			}
		}
	}
	assert.Equal(t, []string{otelrocketry.EventCommit, otelrocketry.EventRecall}, names, "the caller's span events")
}
