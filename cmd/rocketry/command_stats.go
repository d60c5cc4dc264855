package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

func runStats(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("stats")
	addr := fs.String("addr", defaultAddr(), "broker `address` ($"+addrEnv+", when set, changes the default)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the broker")
	var tf tlsFlags
	tf.bind(fs)
	if code, ok := parseFlags("stats", fs, args, stdout, stderr); !ok {
		return code
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "rocketry stats: --timeout %v must be positive\n", *timeout)
		return 2
	}
	creds, err := tf.dialOption()
	if err != nil {
		fmt.Fprintf(stderr, "rocketry stats: %v\n", err)
		return 2
	}
	conn, err := grpc.NewClient(*addr, creds)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry stats: --addr %q: %v\n", *addr, err)
		return 2
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	s, err := rocketryv1.NewConsumerServiceClient(conn).GetStats(ctx, &rocketryv1.GetStatsRequest{})
	if err != nil {
		fmt.Fprintf(stderr, "rocketry stats: %s: %s\n", *addr, cleanError(err))
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(statsJSONOf(s)); err != nil {
			fmt.Fprintf(stderr, "rocketry stats: %v\n", err)
			return 1
		}
		return 0
	}
	writeStatsText(stdout, s)
	return 0
}

// statsJSON is the JSON form of GetStatsResponse, with numbers as numbers.
type statsJSON struct {
	Stored               int64            `json:"stored"`
	Duplicates           int64            `json:"duplicates"`
	Copies               int64            `json:"copies"`       // stored although the id was stored before
	StoredTwice          int64            `json:"stored_twice"` // ids stored more than once
	SendRequests         int64            `json:"send_requests"`
	BadRequests          int64            `json:"bad_requests"`
	Throttled            map[string]int64 `json:"throttled"`
	Faults               map[string]int64 `json:"faults"`
	StorageLoad          float64          `json:"storage_load"`
	ThrottledStorageLoad bool             `json:"throttled_storage_load"`
	Topics               []topicJSON      `json:"topics"`
}

type topicJSON struct {
	Topic            string           `json:"topic"`
	Queues           int32            `json:"queues"`
	Stored           int64            `json:"stored"`
	Backlog          int64            `json:"backlog"`
	Copies           int64            `json:"copies"`
	StoredTwice      int64            `json:"stored_twice"`
	ThrottledBacklog bool             `json:"throttled_backlog"`
	Groups           map[string]int64 `json:"groups"` // backlog by group
}

func statsJSONOf(s *rocketryv1.GetStatsResponse) statsJSON {
	out := statsJSON{
		Stored: s.Stored, Duplicates: s.Duplicates, Copies: s.Copies, StoredTwice: s.StoredTwice, SendRequests: s.SendRequests, BadRequests: s.BadRequests,
		Throttled: s.Throttled, Faults: s.Faults, StorageLoad: s.StorageLoad, ThrottledStorageLoad: s.ThrottledStorageLoad,
		Topics: []topicJSON{},
	}
	for _, t := range s.Topics {
		tj := topicJSON{Topic: t.Topic, Queues: t.Queues, Stored: t.Stored, Backlog: t.Backlog, Copies: t.Copies, StoredTwice: t.StoredTwice,
			ThrottledBacklog: t.ThrottledBacklog, Groups: map[string]int64{}}
		for _, g := range t.Groups {
			tj.Groups[g.Group] = g.Backlog
		}
		out.Topics = append(out.Topics, tj)
	}
	return out
}

func writeStatsText(w io.Writer, s *rocketryv1.GetStatsResponse) {
	fmt.Fprintf(w, "stored %d, duplicates %d, send requests %d, bad requests %d\n", s.Stored, s.Duplicates, s.SendRequests, s.BadRequests)
	fmt.Fprintf(w, "copies %d (ids stored twice %d)\n", s.Copies, s.StoredTwice)
	fmt.Fprintf(w, "throttled: %s\n", formatCounts(s.Throttled))
	fmt.Fprintf(w, "faults: %s\n", formatCounts(s.Faults))
	note := ""
	if s.ThrottledStorageLoad {
		note = " (throttling sends)"
	}
	fmt.Fprintf(w, "storage load: %.1f cold reads/s%s\n", s.StorageLoad, note)
	for _, t := range s.Topics {
		note := ""
		if t.ThrottledBacklog {
			note = " (throttling sends)"
		}
		if t.Copies > 0 {
			note += fmt.Sprintf(", copies %d (ids stored twice %d)", t.Copies, t.StoredTwice)
		}
		fmt.Fprintf(w, "topic %s: %d queues, stored %d, backlog %d%s\n", t.Topic, t.Queues, t.Stored, t.Backlog, note)
		for _, g := range t.Groups {
			fmt.Fprintf(w, "  group %s: backlog %d\n", g.Group, g.Backlog)
		}
	}
}
