package brokertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rocketry-go/rocketry/broker"
)

// StartTLS is Start serving TLS, as httptest.NewTLSServer is to NewServer:
// the broker listens on 127.0.0.1:0 with a self-signed certificate for
// 127.0.0.1 made for the test, and StartTLS returns a client configuration
// that trusts it (dial with credentials.NewTLS(cfg)). It stops the broker
// in t's cleanup and calls t.Fatal as Start does. The broker's Restart
// listens again without TLS: do not use it on a TLS broker.
func StartTLS(t testing.TB, opts ...broker.Option) (*broker.Broker, *tls.Config) {
	t.Helper()
	cert, pool, err := selfSigned()
	if err != nil {
		t.Fatalf("brokertest.StartTLS: making a certificate: %v", err)
		return nil, nil
	}
	b, err := broker.New(opts...)
	if err != nil {
		t.Fatalf("brokertest.StartTLS: %v", err)
		return nil, nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("brokertest.StartTLS: %v", err)
		return nil, nil
	}
	// The broker has taken the listener (and knows its address) once the
	// gRPC server first calls Accept.
	accepting := &firstAccept{Listener: tls.NewListener(lis, &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"}, // gRPC clients require it (ALPN)
	}), ready: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- b.Serve(accepting) }()
	select {
	case <-accepting.ready:
	case err := <-served:
		lis.Close()
		t.Fatalf("brokertest.StartTLS: %v", err)
		return nil, nil
	}
	t.Cleanup(func() {
		b.Stop()
		<-served
	})
	return b, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// firstAccept closes ready on the first call to Accept.
type firstAccept struct {
	net.Listener
	once  sync.Once
	ready chan struct{}
}

func (l *firstAccept) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.ready) })
	return l.Listener.Accept()
}

// selfSigned makes a certificate for 127.0.0.1 that is its own authority,
// valid for a day, and a pool holding it.
func selfSigned() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rocketry brokertest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}
