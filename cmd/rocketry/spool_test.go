package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
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
	assert.Equal(t, "CODE_UNAVAILABLE", r.Code)
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
	assert.Contains(t, out, "3 records, 18 body bytes, 3 pinned to an endpoint, 0 unreadable")

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
		payload, err := proto.Marshal(&rocketryv1.SpoolRecord{Message: &rocketryv1.Message{MessageId: id, Topic: "orders", Body: []byte(id)}, Attempts: 3})
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
