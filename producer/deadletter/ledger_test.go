package deadletter

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLedgerSyncsDirWhenCreated is the regression test of the review's
// ledger item: FILE.delivered was made by an append with O_CREATE and
// fsynced, but not its directory, so a crash could lose the new file's
// entry in it, and with it the entries that keep delivered records from
// being sent again. The append that makes the file syncs the directory;
// one to an existing file does not; a directory that fails to sync fails
// the append, and the next one starts the file over (and syncs it).
func TestLedgerSyncsDirWhenCreated(t *testing.T) {
	dir := t.TempDir()
	l, err := loadLedger(filepath.Join(dir, "dead.db"+ledgerSuffix))
	require.NoError(t, err)
	var synced []string
	var fail error
	l.syncDir = func(d string) error {
		synced = append(synced, d)
		if fail != nil {
			return fail
		}
		return syncDir(d)
	}
	entry := func(k string) []ledgerEntry {
		return []ledgerEntry{{txid: 7, key: k, sum: fingerprintOf([]byte(k))}}
	}

	require.NoError(t, l.add(entry("a")))
	assert.Equal(t, []string{dir}, synced, "the append that made the file synced its directory")
	require.NoError(t, l.add(entry("b")))
	assert.Equal(t, []string{dir}, synced, "an append to the file there does not")

	require.NoError(t, l.compact(8)) // every entry dropped: the file is removed
	fail = errors.New("sync refused by the test")
	assert.ErrorIs(t, l.add(entry("c")), fail, "the file made again, its directory not synced")
	assert.Len(t, synced, 2)
	assert.False(t, l.delivered([]byte("c"), fingerprintOf([]byte("c"))), "an entry not durable is not taken")

	fail = nil
	require.NoError(t, l.add(entry("d")))
	assert.Len(t, synced, 3, "the next append starts the file over, and syncs its directory")
	back, err := loadLedger(l.path)
	require.NoError(t, err)
	assert.True(t, back.delivered([]byte("d"), fingerprintOf([]byte("d"))))
	assert.False(t, back.bad)
}
