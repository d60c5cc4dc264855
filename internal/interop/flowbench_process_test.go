package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// flowSummary is the part of produce.js's and goclient/cmd/produce's
// summary the bench reads.
type flowError struct {
	Name     string `json:"name"`
	Code     int    `json:"code"`
	GRPCCode *int   `json:"grpcCode"`
	Message  string `json:"message"`
}

// kind names e by its code, for a tally.
func (e *flowError) kind() string {
	switch {
	case e == nil:
		return "no error"
	case e.GRPCCode != nil:
		return fmt.Sprintf("grpc %d", *e.GRPCCode)
	case e.Code != 0:
		return fmt.Sprintf("%d %s", e.Code, firstWords(e.Message))
	}
	return e.Name + ": " + firstWords(e.Message)
}

type flowSummary struct {
	Client struct {
		Package string `json:"package"`
		Version string `json:"version"`
	} `json:"client"`
	Error        string          `json:"error"`
	StartupError json.RawMessage `json:"startupError"`
	SendMs       float64         `json:"sendMs"`
	Sent         int             `json:"sent"`
	Failed       int             `json:"failed"`
	Messages     []struct {
		OK        bool       `json:"ok"`
		ElapsedMs float64    `json:"elapsedMs"`
		Error     *flowError `json:"error"`
		Attempts  []struct {
			Code  int        `json:"code"`
			Error *flowError `json:"error"`
		} `json:"attempts"`
	} `json:"messages"`
}

// runFlowProgram runs prog with args in env (nil: the test's), a client
// program printing a summary, and turns the summary into a row; it fails
// the test when the program does not exit 0 with a summary.
func runFlowProgram(t *testing.T, name, prog string, args, env []string) flowRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), flowRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var s flowSummary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil || runErr != nil || s.Error != "" {
		t.Fatalf("%s: %s: %v, summary %v, error %q (startup: %s); want exit 0 with a JSON summary\nstderr:\n%s",
			name, strings.Join(cmd.Args, " "), runErr, err, s.Error, s.StartupError, tail(stderr.String(), 4096))
	}
	t.Logf("%s: client %s %s; %d lines on stderr", name, s.Client.Package, s.Client.Version, strings.Count(stderr.String(), "\n"))
	row := flowRow{
		Elapsed:    time.Duration(s.SendMs * float64(time.Millisecond)),
		Sent:       s.Sent,
		Failed:     s.Failed,
		FailedBy:   map[string]int{},
		AttemptsBy: map[string]int{},
	}
	for _, m := range s.Messages {
		row.Latencies = append(row.Latencies, time.Duration(m.ElapsedMs*float64(time.Millisecond)))
		for _, a := range m.Attempts { // each message is sent alone: one message per attempt
			if a.Error != nil {
				row.AttemptsBy[a.Error.kind()]++
			} else {
				row.AttemptsBy[strconv.Itoa(a.Code)]++
			}
		}
		if !m.OK {
			row.FailedBy[m.Error.kind()]++
		}
	}
	return row
}

// busyTag finds the tag of a broker's busy answer in an error's text.
var busyTag = regexp.MustCompile(`\[(TIMEOUT_CLEAN_QUEUE|OVERLOAD|PCBUSY_CLEAN_QUEUE|PC_SYNCHRONIZED|REJECTREQUEST)\]`)

// firstWords is the tag of a broker's busy answer in s, else the start of
// s up to its first comma, so that failures group by kind.
func firstWords(s string) string {
	if m := busyTag.FindString(s); m != "" {
		return m
	}
	s, _, _ = strings.Cut(s, ",")
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// readStats reads the broker's counts of the topic into row.
func readStats(t *testing.T, addr string, tlsCfg *tls.Config, row *flowRow) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	require.NoError(t, err)
	defer cc.Close()
	st, err := rocketryv1.NewConsumerServiceClient(cc).GetStats(t.Context(), &rocketryv1.GetStatsRequest{})
	require.NoError(t, err, "GetStats of the broker process")
	for _, ts := range st.GetTopics() {
		if ts.GetTopic() == flowTopic {
			row.Stored, row.Copies = ts.GetStored()-ts.GetCopies(), ts.GetCopies()
		}
	}
	row.Requests = st.GetSendRequests()
	row.Refused = st.GetThrottled()
}

// buildRocketry builds the rocketry command into a temporary directory.
func buildRocketry(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool")
	bin := filepath.Join(t.TempDir(), "rocketry")
	ctx, cancel := context.WithTimeout(t.Context(), flowRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/rocketry-go/rocketry/cmd/rocketry")
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rocketry: %v; want success\n%s", err, out)
	}
	return bin
}

// brokerProcess is a `rocketry broker` process.
type brokerProcess struct {
	addr   string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	copied chan struct{} // closed when stdout is read to its end
}

// startBrokerProcess starts `rocketry broker` on 127.0.0.1:0 with args and
// waits for the line that gives its address.
func startBrokerProcess(t *testing.T, bin string, args ...string) *brokerProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"broker", "--listen", "127.0.0.1:0", "--log-level", "error", "--stats-interval", "0"}, args...)...)
	bp := &brokerProcess{cmd: cmd, stderr: &bytes.Buffer{}, copied: make(chan struct{})}
	cmd.Stderr = bp.stderr
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "starting %s broker", bin)
	lines := bufio.NewScanner(stdout)
	const prefix = "rocketry broker: listening on "
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), prefix); ok {
			bp.addr, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	go func() {
		defer close(bp.copied)
		io.Copy(io.Discard, stdout)
	}()
	if _, _, err := net.SplitHostPort(bp.addr); err != nil {
		bp.stop(t)
		t.Fatalf("rocketry broker %s: no %q line (%v); stderr:\n%s", strings.Join(args, " "), prefix, lines.Err(), bp.stderr)
	}
	return bp
}

// stop interrupts the broker process and waits for it to exit.
func (bp *brokerProcess) stop(t *testing.T) {
	t.Helper()
	if err := bp.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("interrupting the broker process: %v", err)
	}
	exited := make(chan error, 1)
	go func() {
		<-bp.copied
		exited <- bp.cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("broker process: %v; want exit 0\nstderr:\n%s", err, tail(bp.stderr.String(), 4096))
		}
	case <-time.After(10 * time.Second):
		bp.cmd.Process.Kill()
		<-exited
		t.Errorf("broker process did not exit in 10 s after an interrupt; killed")
	}
}

// writeSelfSigned writes a certificate for 127.0.0.1, its own authority,
// and its key as PEM files in dir, and returns their paths and a pool
// holding the certificate.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rocketry flow bench"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600))
	pool = x509.NewCertPool()
	pool.AddCert(leaf)
	return certFile, keyFile, pool
}

// loadAverage is /proc/loadavg's first three fields, or why not.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return err.Error()
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return strings.TrimSpace(string(b))
	}
	return strings.Join(f[:3], " ")
}
