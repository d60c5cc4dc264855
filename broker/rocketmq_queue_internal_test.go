package broker

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestJavaStringHash(t *testing.T) {
	for s, want := range map[string]int32{"": 0, "a": 97, "abc": 96354, "hello": 99162322,
		"polygenelubricants": -2147483648, "é": 233, "😀": 55357*31 + 56832} { // a surrogate pair: two code units
		assert.Equal(t, want, javaStringHash(s), "javaStringHash(%q)", s)
	}
}

// TestConsistentHash checks Guava's defining property: consistentHash(h,
// n) is n-1 or consistentHash(h, n-1), and always in [0, n).
func TestConsistentHash(t *testing.T) {
	for h := int64(-1000); h < 1000; h += 7 {
		assert.Equal(t, 0, consistentHash(h, 1))
		for n := 2; n <= 64; n++ {
			got, prev := consistentHash(h, n), consistentHash(h, n-1)
			if got != prev && got != n-1 {
				t.Fatalf("consistentHash(%d, %d) = %d; want %d or %d", h, n, got, prev, n-1)
			}
		}
	}
	counts := make([]int, 8)
	for h := range int64(8000) {
		counts[consistentHash(h*7919, 8)]++
	}
	for q, n := range counts {
		assert.InDelta(t, 1000, n, 200, "queue %d of 8 got %d of 8000", q, n)
	}
}
