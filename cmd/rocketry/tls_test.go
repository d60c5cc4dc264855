package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key,
// and returns their paths; the certificate is its own authority (--ca).
func writeCert(t *testing.T) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rocketry test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return cert, key
}

// TestTLS: the broker serves TLS with --cert and --key, and every command
// that dials reaches it with --ca (or --insecure-skip-verify), on both
// protocols.
func TestTLS(t *testing.T) {
	leakCheck(t)
	withStdin(t, "", true)
	cert, key := writeCert(t)
	out, stop := startBrokerCommand(t, "--listen", "127.0.0.1:0", "--cert", cert, "--key", key)
	defer stop()
	require.Contains(t, out.String(), "(TLS)")
	addr := strings.Fields(strings.SplitN(out.String(), "listening on ", 2)[1])[0]

	for _, args := range [][]string{
		{"produce", "--addr", addr, "--topic", "t", "--count", "5", "--ca", cert},
		{"produce", "--addr", addr, "--topic", "t", "--count", "5", "--async", "--insecure-skip-verify"},
		{"produce", "--addr", addr, "--topic", "t", "--count", "5", "--protocol", "rocketmq", "--tls", "--ca", cert},
		{"stats", "--addr", addr, "--ca", cert},
		{"consume", "--addr", addr, "--topic", "t", "--count", "15", "--quiet", "--ca", cert},
	} {
		var sout, serr bytes.Buffer
		code := run(args, &sout, &serr)
		assert.Equal(t, 0, code, "run(%v): stdout %q, stderr %q", args, sout.String(), serr.String())
		if args[0] == "stats" {
			assert.Contains(t, sout.String(), "stored 15,")
		}
	}

	// Without the authority, the certificate is refused: one line that says so.
	var sout, serr bytes.Buffer
	code := run([]string{"stats", "--addr", addr, "--tls", "--timeout", "2s"}, &sout, &serr)
	assert.Equal(t, 1, code)
	assert.Contains(t, serr.String(), "certificate")
	assert.Equal(t, 1, strings.Count(serr.String(), "\n"), "one line: %q", serr.String())
}

// TestBrokerBindError: an address the broker cannot listen on is bad
// input: one line naming --listen, exit 2 (was 1).
func TestBrokerBindError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	var out, errb bytes.Buffer
	code := run([]string{"broker", "--listen", lis.Addr().String()}, &out, &errb)
	assert.Equal(t, 2, code)
	assert.Regexp(t, `^rocketry broker: --listen 127\.0\.0\.1:\d+: listen tcp .*address already in use\n$`, errb.String())
	code = run([]string{"broker", "--listen", "127.0.0.1:0", "--cert", "/no/such.pem"}, &out, &errb)
	assert.Equal(t, 2, code)
}

// TestBrokerQuietOnTerminal: on a terminal the broker prints its one
// listening line and logs nothing more by default; --log-level info brings
// the log back.
func TestBrokerQuietOnTerminal(t *testing.T) {
	for _, tc := range []struct {
		args []string
		log  bool
	}{
		{nil, false},
		{[]string{"--log-level", "info"}, true},
	} {
		tty := openPTY(t)
		cmd := exec.Command(rocketryBin(t), append([]string{"broker", "--listen", "127.0.0.1:0", "--stats-interval", "1ms"}, tc.args...)...)
		var stdout syncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, tty.tty
		require.NoError(t, cmd.Start())
		tty.closeChild()
		p := &proc{cmd: cmd, done: make(chan struct{})}
		go func() { defer close(p.done); _ = cmd.Wait(); p.code = cmd.ProcessState.ExitCode() }()
		p.until(t, "the listening line", func() bool { return strings.Contains(stdout.String(), "listening on ") })
		p.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.wait(t))
		assert.Equal(t, 1, strings.Count(stdout.String(), "\n"), "one line: %q", stdout.String())
		screen := tty.output()
		assert.NotContains(t, screen, "broker: stats")
		if tc.log {
			assert.Contains(t, screen, "broker: listening")
		} else {
			assert.Empty(t, screen)
		}
	}
}
