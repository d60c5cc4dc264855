package deadletter_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/rocketry-go/rocketry/producer/deadletter"
)

// BenchmarkOpen measures what Open's check of every page costs: the same
// store of 10,000 records of 1 KiB, opened by bbolt alone (read-write, as
// Open ends) and by Open. Their ratio is the price of the check.
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "dead.db")
	s, err := deadletter.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(strings.Repeat("x", 1024))
	for i := range 10_000 {
		d := letter(fmt.Sprintf("m-%05d", i), "")
		d.Message.Body = body
		if err := s.Put(d); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run("bbolt", func(b *testing.B) {
		for b.Loop() {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("deadletter", func(b *testing.B) {
		for b.Loop() {
			s, err := deadletter.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
