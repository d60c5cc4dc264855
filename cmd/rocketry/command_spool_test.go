package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/rocketry-go/rocketry/broker/brokertest"
	"github.com/rocketry-go/rocketry/brokercode"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/internal/deadletterpb"
	"github.com/rocketry-go/rocketry/producer"
	"github.com/rocketry-go/rocketry/producer/deadletter"
)

func runSpoolCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(append([]string{"spool"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestSpoolLsShowStats(t *testing.T) {
	path := writeSpool(t, 3, "10.0.0.1:7777")

	code, out, stderr := runSpoolCmd("ls", path)
	require.Equal(t, 0, code, "stderr %q", stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, "a header and 3 records: %q", out)
	assert.Contains(t, lines[0], "MAYBE STORED AT")
	assert.Regexp(t, `^m-0\s+orders\s+3\s+10\.0\.0\.1:7777\s+\S+\s+unavailable$`, lines[1])

	code, out, _ = runSpoolCmd("ls", "--json", path)
	require.Equal(t, 0, code)
	var ls struct{ Records []spoolRecord }
	require.NoError(t, json.Unmarshal([]byte(out), &ls))
	require.Len(t, ls.Records, 3)
	r := ls.Records[2]
	assert.Equal(t, "m-2", r.ID)
	assert.Equal(t, "10.0.0.1:7777", r.MaybeStoredAt)
	assert.Equal(t, 3, r.Attempts)
	assert.Equal(t, "UNAVAILABLE", r.Code)
	assert.Equal(t, len("body 2"), r.BodyBytes)
	assert.Empty(t, r.Body, "ls leaves the body out")

	code, out, _ = runSpoolCmd("show", path, "m-1", "--json")
	require.Equal(t, 0, code)
	var show spoolRecord
	require.NoError(t, json.Unmarshal([]byte(out), &show))
	assert.Equal(t, "body 1", show.Body)
	code, _, stderr = runSpoolCmd("show", path, "nope")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no record")

	code, out, _ = runSpoolCmd("stats", "--json", path)
	require.Equal(t, 0, code)
	var st spoolStats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, 3, st.Records)
	assert.Equal(t, 3, st.Pinned)
	assert.Equal(t, map[string]int{"orders": 3}, st.Topics)
	assert.Equal(t, int64(3*len("body 0")), st.BodyBytes)
	code, out, _ = runSpoolCmd("stats", path)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "3 records, 18 body bytes, 3 pinned to an endpoint, 0 damaged")

	// Nothing was sent or changed: a replay would still find every record.
	assert.Equal(t, 3, storeLen(t, path))
}

func TestSpoolBadUsage(t *testing.T) {
	path := writeSpool(t, 1)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, ""},
		{[]string{"rm", path}, 2, `unknown subcommand "rm"`},
		{[]string{"ls"}, 2, "want 1 argument(s), got 0"},
		{[]string{"show", path}, 2, "want 2 argument(s), got 1"},
		{[]string{"ls", "--nope", path}, 2, "-nope"},
		{[]string{"ls", filepath.Join(t.TempDir(), "missing.db")}, 1, "no such file"},
	} {
		code, _, stderr := runSpoolCmd(tt.args...)
		assert.Equal(t, tt.code, code, "spool %v: stderr %q", tt.args, stderr)
		assert.Contains(t, stderr, tt.want, "spool %v", tt.args)
	}
	code, out, _ := runSpoolCmd("-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "rocketry spool ls")
}

// TestSpoolImport: an old spool file is refused by produce and replay with
// what to do, and `spool import` puts its records into a store.
func TestSpoolImport(t *testing.T) {
	leakCheck(t)
	dir := t.TempDir()
	old := filepath.Join(dir, "dead.spool")
	data := binary.LittleEndian.AppendUint32([]byte("RKTSPOOL"), 1)
	for _, id := range []string{"a", "b"} {
		payload, err := proto.Marshal(&deadletterpb.Record{Message: &rocketryv1.Message{MessageId: id, Topic: "orders", Body: []byte(id)}, Attempts: 3})
		require.NoError(t, err)
		data = binary.LittleEndian.AppendUint32(data, uint32(len(payload)))
		data = binary.LittleEndian.AppendUint32(data, crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
		data = append(data, payload...)
	}
	require.NoError(t, os.WriteFile(old, data, 0o600))

	var out, errb bytes.Buffer
	code := run([]string{"replay", "--spool", old, "--addr", "127.0.0.1:9"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "rocketry spool import "+old)

	store := filepath.Join(dir, "dead.db")
	code, stdout, stderr := runSpoolCmd("import", old, store)
	require.Equal(t, 0, code, "stderr %q", stderr)
	assert.Contains(t, stdout, "imported 2 records")
	assert.Equal(t, 2, storeLen(t, store))
}

// docsDamagedStore returns the shell block of docs/cli.md's paragraph "A
// damaged store" (the walk-through's recovery of a damaged store).
func docsDamagedStore(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "**A damaged store.**")
	require.True(t, ok, "docs/cli.md has no paragraph on a damaged store")
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok, "the paragraph has no sh block")
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	return block
}

// damagedStore writes a store of n records m-00.. into dir/dead.db (put
// into a first store, then salvaged, so that no free page holds an old copy
// of a record) and changes one byte of the body of record bad; it returns
// the store's path.
func damagedStore(t *testing.T, dir string, n, bad int) string {
	t.Helper()
	first, path := filepath.Join(dir, "first.db"), filepath.Join(dir, "dead.db")
	s, err := deadletter.Open(first)
	require.NoError(t, err)
	for i := range n {
		m := &producer.Message{ID: fmt.Sprintf("m-%02d", i), Topic: "orders", Body: []byte(fmt.Sprintf("the body of message %02d", i))}
		require.NoError(t, s.Put(&producer.DeadLetter{Message: m, Err: "unavailable", Attempts: 3, Code: brokercode.Unavailable}))
	}
	require.NoError(t, s.Close())
	_, err = deadletter.Salvage(first, path)
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	body := []byte(fmt.Sprintf("the body of message %02d", bad))
	at := bytes.Index(data, body)
	require.GreaterOrEqual(t, at, 0, "record %d not found in the file", bad)
	require.Equal(t, -1, bytes.Index(data[at+1:], body), "record %d twice in the file (an old page)", bad)
	data[at+4] ^= 0x20 // "the Body of message ..."
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// TestDocsDamagedStore runs docs/cli.md's lines on a damaged store with the
// built binary: check exits 1 and names the damaged record, salvage copies
// the others and says it left one out, and the replay of the salvaged store
// stores each intact record once and the damaged one never.
func TestDocsDamagedStore(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := rocketryBin(t)
	dir := t.TempDir()
	damagedStore(t, dir, 30, 7)
	b := brokertest.Start(t)
	for i, line := range strings.Split(strings.TrimSpace(docsDamagedStore(t)), "\n") {
		line = strings.ReplaceAll(line, "/tmp/rocketry", "ROCKETRY_BIN")
		line = strings.ReplaceAll(strings.ReplaceAll(line, "/tmp/", dir+"/"), "ROCKETRY_BIN", bin)
		cmd := exec.Command("bash", "-c", line)
		cmd.Env = append(os.Environ(), addrEnv+"="+b.Addr())
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		t.Logf("%s\n%s", line, out)
		switch i {
		case 0: // check
			assert.Equal(t, 1, code, "spool check of a damaged store exits 1")
			assert.Regexp(t, `DAMAGED: 29 records intact, 1 damaged, 0 pages of records lost`, string(out))
			assert.Contains(t, string(out), `damaged record: key "m-07": record checksum mismatch`)
		case 1: // salvage
			assert.Equal(t, 0, code)
			assert.Contains(t, string(out), "copied 29 records; left out: 1 damaged records, 0 pages of records lost, 0 records already delivered")
		case 2: // replay of the salvaged store
			assert.Equal(t, 0, code)
			assert.Contains(t, string(out), "stored 29")
		}
	}
	onBroker := storedIDs(b, "orders")
	assert.Len(t, onBroker, 29)
	assert.Zero(t, onBroker["m-07"], "the damaged record is never sent")
	for id, c := range onBroker {
		assert.Equal(t, 1, c, id)
	}
}

// TestSpoolCheckSalvageBinary drives the built binary on a store cut short
// and on a damaged one: ls and replay refuse the cut one and name spool
// check; check exits 1 with what is damaged (JSON too); salvage writes a
// store that check finds intact; ls lists a damaged record as damaged.
func TestSpoolCheckSalvageBinary(t *testing.T) {
	dir := t.TempDir()
	path := damagedStore(t, dir, 30, 7)

	p := startBin(t, nil, nil, "spool", "ls", path)
	require.Equal(t, 0, p.wait(t), p.stderr.String())
	assert.Regexp(t, `(?m)^m-07\s+DAMAGED \(never sent, kept\): record checksum mismatch`, p.stdout.String())

	p = startBin(t, nil, nil, "spool", "check", "--json", path)
	require.Equal(t, 1, p.wait(t))
	var rep struct {
		Intact     bool
		Records    int
		Damaged    []struct{ Key string }
		PagesInUse int `json:"pages_in_use"`
	}
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep), p.stdout.String())
	assert.False(t, rep.Intact)
	assert.Equal(t, 29, rep.Records)
	require.Len(t, rep.Damaged, 1)
	assert.Equal(t, "m-07", rep.Damaged[0].Key)

	// Cut short: the last page in use is gone.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cut := filepath.Join(dir, "cut.db")
	require.NoError(t, os.WriteFile(cut, data[:(rep.PagesInUse-1)*os.Getpagesize()], 0o600))
	p = startBin(t, nil, nil, "spool", "stats", cut)
	assert.Equal(t, 1, p.wait(t))
	assert.Contains(t, p.stderr.String(), "rocketry spool check "+cut)
	assert.NotContains(t, p.stderr.String(), "panic")
	p = startBin(t, nil, nil, "replay", "--spool", cut, "--addr", "127.0.0.1:9")
	assert.Equal(t, 1, p.wait(t))
	assert.Contains(t, p.stderr.String(), "damaged store")

	saved := filepath.Join(dir, "saved.db")
	p = startBin(t, nil, nil, "spool", "salvage", path, saved)
	require.Equal(t, 0, p.wait(t), p.stderr.String())
	p = startBin(t, nil, nil, "spool", "check", saved)
	assert.Equal(t, 0, p.wait(t), p.stdout.String())
	assert.Contains(t, p.stdout.String(), "intact: 29 records intact, 0 damaged")
	p = startBin(t, nil, nil, "spool", "salvage", path, saved)
	assert.Equal(t, 1, p.wait(t))
	assert.Contains(t, p.stderr.String(), "exists")
}
