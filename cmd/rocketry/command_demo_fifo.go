package main

import (
	"strconv"
	"strings"
)

// fifoGroup is the message group of message i: every 10th SendAsync
// message belongs to one of c.fifoGroups groups, in turn; the others, and
// every Send message, to none.
func (c *demoConfig) fifoGroup(i int) string {
	if c.fifoGroups == 0 || i >= c.asyncCount() || i%10 != 0 {
		return ""
	}
	return "group-" + strconv.Itoa((i/10)%c.fifoGroups)
}

// checkFIFO reads each message group's messages in the broker's log (one
// queue per group, in offset order) and counts, against the order they were
// sent in: the stored group messages, those stored before an earlier
// message of their group (out of order), and copies next to their first
// store (a retry after an unknown outcome over apache.rocketmq.v2). It runs
// before any replay, which sends dead letters again at the end.
func (r *demoRun) checkFIFO() demoFIFO {
	f := demoFIFO{Groups: r.c.fifoGroups}
	for i, ok := range r.accepted {
		if ok && r.c.fifoGroup(i) != "" {
			f.Sent++
		}
	}
	last := map[string]int{}
	for _, m := range r.b.Messages(demoTopic) {
		g := m.GetMessage().GetMessageGroup()
		if g == "" {
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(m.GetMessage().GetMessageId(), "demo-"))
		if err != nil {
			continue
		}
		prev, seen := last[g]
		switch {
		case seen && i == prev:
			f.Copies++
		case seen && i < prev:
			f.OutOfOrder++
		default:
			f.Stored++
			last[g] = i
		}
	}
	return f
}
