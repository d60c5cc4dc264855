package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/rocketry-go/rocketry/broker"
)

// metricsFlag adds --metrics to the broker's flags.
func metricsFlag(fs *flag.FlagSet, c *brokerConfig) {
	fs.StringVar(&c.metrics, "metrics", "", "serve the broker's metrics in the Prometheus text format at http://`ADDR`/metrics (e.g. 127.0.0.1:9090); empty = off")
}

// serveMetrics serves b's metrics on addr at /metrics until the returned
// function is called; with addr empty it does nothing.
func serveMetrics(addr string, b *broker.Broker, stdout io.Writer) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", b.MetricsHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis) // ends with ErrServerClosed
	}()
	fmt.Fprintf(stdout, "rocketry broker: metrics at http://%s/metrics\n", lis.Addr())
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}
