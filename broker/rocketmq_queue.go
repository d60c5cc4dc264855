package broker

import "unicode/utf16"

// groupQueue is the queue, of n, the RocketMQ 5 proxy sends a single
// message with message group group to: Guava's
// Hashing.consistentHash(group.hashCode(), n), as
// SendMessageActivity.SendMessageQueueSelector does in
// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/producer/SendMessageActivity.java.
// The proxy hashes over the write queues of the whole route; the broker
// stores only its own messages, so it hashes over its own queues.
func groupQueue(group string, n int) int {
	return consistentHash(int64(javaStringHash(group)), n)
}

// javaStringHash is Java's String.hashCode: s[0]*31^(k-1) + ... + s[k-1]
// over the UTF-16 code units of s, in 32-bit arithmetic.
func javaStringHash(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}

// consistentHash is Guava's Hashing.consistentHash(long, int): a bucket in
// [0, buckets) from a linear congruential generator seeded with input.
func consistentHash(input int64, buckets int) int {
	state := input
	candidate := 0
	for {
		state = 2862933555777941757*state + 1
		d := float64(int32(uint64(state)>>33)+1) / (1 << 31)
		next := float64(candidate+1) / d
		if next < 0 || next >= float64(buckets) { // Java's (int) saturates: out of range too
			return candidate
		}
		candidate = int(next)
	}
}
