package pacesim

import (
	"os"
	"strconv"
	"time"
)

// Shapes are the scenarios of the pacer's targets (docs/pacing.md), each
// of duration d.
func Shapes(d time.Duration) map[string]Scenario {
	bucket := func(rate float64, burst int) Broker {
		return Broker{RTT: 200 * time.Microsecond, Default: &Bucket{Rate: rate, Burst: burst}}
	}
	one := func(senders int) []Producer { return []Producer{{Senders: senders}} }
	fleet := func(n, senders int, apart time.Duration) []Producer {
		ps := make([]Producer, n)
		for i := range ps {
			ps[i] = Producer{Senders: senders, Start: time.Duration(i) * apart}
		}
		return ps
	}
	rtt := bucket(2000, 200)
	rtt.RTT = 25 * time.Millisecond
	stall := bucket(2000, 10)
	stall.StallEvery, stall.Stall = 200*time.Millisecond, 5*time.Millisecond
	return map[string]Scenario{
		"bucket-64":       {Duration: d, Broker: bucket(2000, 200), Producers: one(64)},
		"bucket-4":        {Duration: d, Broker: bucket(2000, 200), Producers: one(4)},
		"bucket-256-b50":  {Duration: d, Broker: bucket(2000, 50), Producers: one(256)},
		"bucket-64-b10":   {Duration: d, Broker: bucket(2000, 10), Producers: one(64)},
		"bucket-500-b20":  {Duration: d, Broker: bucket(500, 20), Producers: one(64)},
		"queue-200":       {Duration: d, Broker: Broker{RTT: 200 * time.Microsecond, Queue: 200}, Producers: one(64)},
		"queue-2000":      {Duration: d, Broker: Broker{RTT: 200 * time.Microsecond, Queue: 2000}, Producers: one(512)},
		"fleet-8x8":       {Duration: d, Broker: bucket(2000, 200), Producers: fleet(8, 8, 0)},
		"fleet-8x8-apart": {Duration: max(d, 30*time.Second), Broker: bucket(2000, 200), Producers: fleet(8, 8, 2*time.Second)},
		"moving":          {Duration: 30 * time.Second, Broker: Broker{RTT: 200 * time.Microsecond, Default: &Bucket{Rate: 2000, Burst: 200, Steps: []Step{{10 * time.Second, 500}, {20 * time.Second, 3000}}}}, Producers: one(64)},
		"rtt-25ms":        {Duration: d, Broker: rtt, Producers: one(64)},
		"stall-b10":       {Duration: d, Broker: stall, Producers: one(64)},
		"busy-64":         {Duration: d, Broker: bucket(2000, 200), Producers: []Producer{{Senders: 64, Busy: 500 * time.Microsecond}}},
		"busy-b10":        {Duration: d, Broker: bucket(2000, 10), Producers: []Producer{{Senders: 64, Busy: 500 * time.Microsecond}}},
		"oneinten":        {Duration: d, Broker: Broker{RTT: 200 * time.Microsecond, Noise: 0.1}, Producers: one(64)},
		"hot-cold":        {Duration: d, Broker: Broker{RTT: 200 * time.Microsecond, Topics: map[string]*Bucket{"hot": {Rate: 500, Burst: 50}}}, Producers: []Producer{{Senders: 64, Topics: []string{"hot", "cold"}}}},
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
