package deadletter_test

import (
	"encoding/binary"
	"os"
	"testing"
)

// FuzzOpenDamaged damages a copy of a small store made by the store (the
// one of TestFlippedByteStore: a replay delivered some of its records last)
// and opens and replays it, checking, salvaging and replaying the salvaged
// store when Open refuses it. op picks the damage: a truncation at a, a
// byte at a flipped with b, pages a and b swapped, or patch written at a;
// then the same promises as the deterministic tests: no panic, no hang, no
// record sent other than as it was put or twice, none delivered before
// sent again, and every kept record replayed once or reported.
func FuzzOpenDamaged(f *testing.F) {
	// The store it damages, built once per run of the target (a fuzzing
	// worker runs it once; -count=N, N times, each with its own directory).
	dir := fastDir(f)
	path, want := buildDamageStore(f, dir)
	base, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	ps := uint32(os.Getpagesize())
	for _, s := range []struct {
		op    uint8
		a, b  uint32
		patch []byte
	}{
		{0, 3*ps + 100, 0, nil},          // cut inside a page
		{0, 8 * ps, 0, nil},              // cut at a page boundary
		{1, 16 + 40, 0x01, nil},          // meta 0's pgid
		{1, ps + 16 + 40, 0x01, nil},     // meta 1's pgid
		{1, 2*ps + 10, 0x01, nil},        // a count
		{2, 2, 3, nil},                   // two pages swapped
		{2, 4, 7, nil},                   //
		{3, 4*ps + 16, 0, []byte{0, 0}},  // an element zeroed
		{3, 5*ps + 8, 0, []byte{1, 0}},   // a page's flags
		{3, 6*ps + 200, 0, []byte("xy")}, // a value
	} {
		f.Add(s.op, s.a, s.b, s.patch)
	}
	f.Fuzz(func(t *testing.T, op uint8, a, b uint32, patch []byte) {
		data := append([]byte(nil), base...)
		n := uint32(len(data))
		switch op % 4 {
		case 0:
			data = data[:a%n]
		case 1:
			data[a%n] ^= byte(b) | 1
		case 2:
			pa, pb := a%(n/ps), b%(n/ps)
			copy(data[pa*ps:(pa+1)*ps], base[pb*ps:(pb+1)*ps])
			copy(data[pb*ps:(pb+1)*ps], base[pa*ps:(pa+1)*ps])
		case 3:
			copy(data[a%n:], patch)
			if len(patch) >= 4 && b%2 == 1 { // and a 32-bit value at b, as a length or count
				binary.LittleEndian.PutUint32(data[b%(n-4):], binary.LittleEndian.Uint32(patch))
			}
		}
		if len(data) == 0 {
			return // an empty file is a new store
		}
		o := replayCopy(t, dir, path, data)
		checkOutcome(t, "damaged copy", want, o)
	})
}
