package goclient_test

import (
	"context"
	"strconv"
	"testing"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/internal/interop/goclient/kit"
	"github.com/rocketry-go/rocketry/internal/paired"
	"github.com/rocketry-go/rocketry/producer"
)

// The fast path over RocketMQ 5 beside the official Go client, both in
// this process against brokertest over TLS (the official client dials TLS
// only), a normal topic, 100-byte bodies:
//
//	cd internal/interop/goclient
//	go test -run '^$' -bench 'Official' -benchmem -benchtime 6000x
//
// BenchmarkSendOfficial gives each client's allocations per sync send
// (the broker's counted: compare, do not read absolutely);
// BenchmarkPairedOfficial alternates batches of 128 sync sends of rocketry
// and of the official producer (internal/paired) and reports the median
// over batch pairs of rocketry's time over the official client's
// (x-official).

const benchTopic = "bench-normal"

var benchBody = make([]byte, 100)

// benchClients starts a broker and a started client of each kind.
func benchClients(b *testing.B) (rocketry, official func(context.Context) error) {
	kit.LogToStderr(false)
	br, tlsCfg := brokertest.StartTLS(b, broker.WithTopicType(benchTopic, broker.TopicNormal))
	p, err := producer.New(br.Addr(), producer.WithTLS(tlsCfg))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	op, err := rmq.NewProducer(&rmq.Config{Endpoint: br.Addr(), Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics(benchTopic))
	if err != nil {
		b.Fatal(err)
	}
	if err := op.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = op.GracefulStop() })
	rocketry = func(ctx context.Context) error {
		_, err := p.Send(ctx, &producer.Message{Topic: benchTopic, Body: benchBody})
		return err
	}
	official = func(ctx context.Context) error {
		_, err := op.Send(ctx, &rmq.Message{Topic: benchTopic, Body: benchBody})
		return err
	}
	for range 64 { // connect, read the route, warm up
		if err := rocketry(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := official(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return rocketry, official
}

func BenchmarkSendOfficial(b *testing.B) {
	rocketry, official := benchClients(b)
	for _, conc := range []int{1, 64} {
		for _, c := range []struct {
			name string
			op   func(context.Context) error
		}{{"rocketry", rocketry}, {"official", official}} {
			b.Run("client="+c.name+"/conc="+strconv.Itoa(conc), func(b *testing.B) {
				b.ReportAllocs()
				b.ResetTimer()
				paired.Batch(b, conc, b.N, c.op)
			})
		}
	}
}

func BenchmarkPairedOfficial(b *testing.B) {
	rocketry, official := benchClients(b)
	for _, conc := range []int{1, 64} {
		b.Run("conc="+strconv.Itoa(conc), func(b *testing.B) {
			paired.Run(b, conc, "official", rocketry, official)
		})
	}
}
