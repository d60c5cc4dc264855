package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rocketry-go/rocketry/producer"
)

// The command-line names of the wire protocols (--protocol).
const (
	protoRocketMQ = "rocketmq" // apache.rocketmq.v2, producer.RocketMQ5
	protoRocketry = "rocketry" // rocketry.v1, producer.RocketryV1
)

// secretKeyEnv is the environment variable --secret-key defaults to, so
// that the secret stays out of shell history and process listings.
const secretKeyEnv = "ROCKETRY_SECRET_KEY"

// getenv reads the environment; tests replace it.
var getenv = os.Getenv

// parseProtocol turns a --protocol value into the producer's protocol.
func parseProtocol(name string) (producer.Protocol, error) {
	switch name {
	case protoRocketMQ:
		return producer.RocketMQ5, nil
	case protoRocketry:
		return producer.RocketryV1, nil
	}
	return 0, fmt.Errorf("--protocol %q: must be %s or %s", name, protoRocketMQ, protoRocketry)
}

// protocolFlags are the flags of produce and replay that choose the wire
// protocol and, for RocketMQ 5, how to reach the proxy.
type protocolFlags struct {
	protocol  string
	accessKey string
	secretKey string
	namespace string
	tls       tlsFlags

	secretFromEnv bool // secretKey came from secretKeyEnv
}

// bind adds the flags to fs; the protocol's default is rocketmq, as
// producer.New's: what RocketMQ 5 proxies speak ("rocketry broker" serves
// both).
func (p *protocolFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&p.protocol, "protocol", protoRocketMQ,
		`wire protocol: "rocketmq" (apache.rocketmq.v2, what RocketMQ 5 proxies speak) or "rocketry" (rocketry.v1, rocketry's own); `+
			"rocketry broker serves both on one port")
	fs.StringVar(&p.accessKey, "access-key", "", "RocketMQ 5 access key: sign every call (with --protocol rocketmq; needs the secret key)")
	fs.StringVar(&p.secretKey, "secret-key", "",
		"RocketMQ 5 secret key (with --access-key); default: $"+secretKeyEnv+", which keeps it out of shell history")
	fs.StringVar(&p.namespace, "namespace", "", "RocketMQ 5 namespace of the topics (with --protocol rocketmq)")
	p.tls.bind(fs)
}

// validate checks the flags together; set holds the flags given on the
// command line. It reads the secret from secretKeyEnv when --access-key is
// given without --secret-key.
func (p *protocolFlags) validate(set map[string]bool) error {
	if _, err := parseProtocol(p.protocol); err != nil {
		return err
	}
	if err := p.tls.validate(set); err != nil {
		return err
	}
	if p.protocol != protoRocketMQ {
		for _, name := range []string{"access-key", "secret-key", "namespace"} {
			if set[name] {
				return fmt.Errorf("--%s: only with --protocol %s (it is a RocketMQ 5 setting)", name, protoRocketMQ)
			}
		}
		return nil
	}
	switch {
	case set["access-key"] && p.accessKey == "":
		return errors.New("--access-key: must not be empty")
	case set["secret-key"] && p.accessKey == "":
		return errors.New("--secret-key: only with --access-key")
	case set["namespace"] && p.namespace == "":
		return errors.New("--namespace: must not be empty")
	}
	if p.accessKey != "" && !set["secret-key"] {
		p.secretKey, p.secretFromEnv = getenv(secretKeyEnv), true
		if p.secretKey == "" {
			return fmt.Errorf("--access-key %q: give the secret key in $%s (or --secret-key)", p.accessKey, secretKeyEnv)
		}
	}
	if p.accessKey != "" && p.secretKey == "" {
		return errors.New("--secret-key: must not be empty")
	}
	return nil
}

// options are the producer options the flags ask for; the error names a
// --ca file that cannot be read.
func (p *protocolFlags) options() ([]producer.Option, error) {
	proto, err := parseProtocol(p.protocol)
	if err != nil {
		panic(err) // validated
	}
	opts := []producer.Option{producer.WithProtocol(proto)}
	cfg, err := p.tls.config()
	switch {
	case err != nil:
		return nil, err
	case cfg != nil && proto == producer.RocketMQ5:
		opts = append(opts, producer.WithTLS(cfg))
	case cfg != nil:
		opts = append(opts, producer.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cfg))))
	}
	if p.accessKey != "" {
		opts = append(opts, producer.WithCredentials(p.accessKey, p.secretKey, ""))
	}
	if p.namespace != "" {
		opts = append(opts, producer.WithNamespace(p.namespace))
	}
	return opts, nil
}

// tlsFlags are the TLS flags of every command that dials a broker.
type tlsFlags struct {
	on         bool
	ca         string
	skipVerify bool
}

func (t *tlsFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&t.on, "tls", false, "connect with TLS, verifying the server against the system's roots (or --ca)")
	fs.StringVar(&t.ca, "ca", "", "PEM `file` of the certificate authorities to verify the server with (implies --tls)")
	fs.BoolVar(&t.skipVerify, "insecure-skip-verify", false, "with TLS, do not verify the server's certificate (tests only; implies --tls)")
}

// validate refuses --tls=false beside --ca or --insecure-skip-verify.
func (t *tlsFlags) validate(set map[string]bool) error {
	if set["tls"] && !t.on && (t.ca != "" || t.skipVerify) {
		return errors.New("--tls=false: --ca and --insecure-skip-verify need TLS")
	}
	if set["ca"] && t.ca == "" {
		return errors.New("--ca: must not be empty")
	}
	return nil
}

// config is the client's TLS configuration, or nil for plaintext.
func (t *tlsFlags) config() (*tls.Config, error) {
	if !t.on && t.ca == "" && !t.skipVerify {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.skipVerify} // a nil RootCAs is the system's pool
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return nil, fmt.Errorf("--ca %s: %v", t.ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca %s: no PEM certificate in it", t.ca)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// dialOption is the transport credentials of a gRPC client the command
// makes itself (stats, consume).
func (t *tlsFlags) dialOption() (grpc.DialOption, error) {
	cfg, err := t.config()
	if err != nil || cfg == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// flagsOf adds to m the flag each RocketMQ option comes from, for
// newProducerError. The secret is never named with its value.
func (p *protocolFlags) flagsOf(m map[string]string) {
	m["WithProtocol"] = "--protocol " + p.protocol
	m["WithCredentials"] = fmt.Sprintf("--access-key %s", p.accessKey)
	m["WithNamespace"] = fmt.Sprintf("--namespace %q", p.namespace)
	m["WithTLS"] = "--tls"
	m["WithDialOptions"] = "--tls"
}

// checkAddr checks --addr as producer.New reads it (host:port, a
// comma-separated list of them, or a target with a scheme), so that a bad
// address is a usage error found before any connection.
func checkAddr(addr string) error {
	if addr == "" {
		return errors.New("--addr is required")
	}
	if strings.Contains(addr, "://") {
		return nil
	}
	for _, a := range strings.Split(addr, ",") {
		if _, _, err := net.SplitHostPort(strings.TrimSpace(a)); err != nil {
			return fmt.Errorf("--addr %q: %q is not host:port", addr, strings.TrimSpace(a))
		}
	}
	return nil
}

// newProducerError turns an error of producer.New into one line for
// stderr that names the flag at fault, and the exit status. flags maps
// producer option names to the flags (with their values) that set them.
// An *producer.OptionError names its option; anything else is about the
// address: a usage error for rocketry.v1, whose New makes no call, and a
// failure (exit 1) for RocketMQ 5, whose New waits for the proxy's
// Settings.
func newProducerError(err error, flags map[string]string, addr string, proto producer.Protocol) (string, int) {
	var oe *producer.OptionError
	if errors.As(err, &oe) {
		reason := oe.Reason
		if oe.Value == "" && oe.Where != "" {
			reason += " " + oe.Where
		}
		if f, ok := flags[oe.Option]; ok {
			return f + ": " + oneLine(reason), 2
		}
		return cleanError(err), 2
	}
	if proto == producer.RocketMQ5 && !errors.Is(err, producer.ErrInvalidTarget) {
		// New dials the proxy: an unreachable one is a failure, not bad
		// input.
		return fmt.Sprintf("--addr %s: %s", addr, cleanError(err)), 1
	}
	return fmt.Sprintf("--addr %s: %s", addr, cleanError(err)), 2
}
