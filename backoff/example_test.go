package backoff_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rocketry-go/rocketry/backoff"
)

func ExampleNewConnection() {
	c, err := backoff.NewConnection(backoff.DefaultConfig)
	if err != nil {
		panic(err)
	}
	for _, n := range []int{1, 2, 3, 11, 1_000_000} {
		d, _ := c.Delay(n, nil) // nil: no jitter
		fmt.Printf("retry %d: %v\n", n, d.Round(time.Millisecond))
	}
	// Output:
	// retry 1: 1s
	// retry 2: 1.6s
	// retry 3: 2.56s
	// retry 11: 1m49.951s
	// retry 1000000: 2m0s
}

func ExampleConnection_Delay_jitter() {
	c, _ := backoff.NewConnection(backoff.DefaultConfig)
	r := rand.New(rand.NewPCG(1, 2)) // seeded: the same delays every run
	d1, _ := c.Delay(1, r)
	d2, _ := c.Delay(2, r)
	fmt.Println(d1, d2 >= 1280*time.Millisecond && d2 <= 1920*time.Millisecond)
	// Output: 1s true
}

func ExampleParsePolicy() {
	p, err := backoff.ParsePolicy([]byte(`{
	  "healthyRetryPolicy": {
	    "minDelayTarget": 1, "maxDelayTarget": 60, "numRetries": 50,
	    "numNoDelayRetries": 3, "numMinDelayRetries": 2, "numMaxDelayRetries": 35,
	    "backoffFunction": "exponential"
	  },
	  "throttlePolicy": {"maxReceivesPerSecond": 10}
	}`))
	if err != nil {
		panic(err)
	}
	for _, n := range []int{1, 4, 6, 10, 15, 16, 50} {
		d, _ := p.Delay(n, nil)
		fmt.Printf("retry %2d %-12s %v\n", n, p.Phase(n), d.Round(time.Millisecond))
	}
	fmt.Println(p.Retries(), "retries,", p.MaxReceivesPerSecond(), "per second")
	// Output:
	// retry  1 immediate    0s
	// retry  4 pre-backoff  1s
	// retry  6 backoff      1s
	// retry 10 backoff      6.17s
	// retry 15 backoff      1m0s
	// retry 16 post-backoff 1m0s
	// retry 50 post-backoff 1m0s
	// 50 retries, 10 per second
}

func ExampleParsePolicy_typo() {
	_, err := backoff.ParsePolicy([]byte(`{"healthyRetryPolicy": {"numRetrys": 5}}`))
	fmt.Println(err)
	_, err = backoff.ParsePolicy([]byte(`{"healthyRetryPolicy": {"numRetries": 500}}`))
	fmt.Println(err)
	// Output:
	// backoff: healthyRetryPolicy.numRetrys: unknown field; want one of minDelayTarget, maxDelayTarget, numRetries, numNoDelayRetries, numMinDelayRetries, numMaxDelayRetries, backoffFunction
	// backoff: healthyRetryPolicy.numRetries = 500: want 0..100
}

func ExampleBackoffFunction() {
	for _, f := range backoff.BackoffFunctions {
		fmt.Printf("%-11s", f)
		for k := 1; k <= 5; k++ {
			fmt.Printf(" %5.1f", f.At(k, 5, time.Second, time.Minute).Seconds())
		}
		fmt.Println()
	}
	// Output:
	// arithmetic    1.0  24.6  42.3  54.1  60.0
	// exponential   1.0   2.8   7.7  21.6  60.0
	// geometric     1.0  40.8  54.1  58.5  60.0
	// linear        1.0  15.8  30.5  45.2  60.0
}

func ExamplePlan() {
	p := backoff.CustomerManaged()
	steps := backoff.Plan(p, -1, nil) // all 50 retries, no jitter
	for _, s := range steps[:4] {
		fmt.Printf("%d %s %v %v\n", s.Retry, s.Phase, s.Delay.Round(time.Second), s.Elapsed.Round(time.Second))
	}
	last := steps[len(steps)-1]
	fmt.Printf("%d retries over %v\n", last.Retry, last.Elapsed.Round(time.Minute))
	// Output:
	// 1 pre-backoff 10s 10s
	// 2 pre-backoff 10s 20s
	// 3 backoff 10s 30s
	// 4 backoff 16s 46s
	// 50 retries over 6h47m0s
}

func ExamplePreset() {
	_, err := backoff.Preset("aws")
	fmt.Println(err)
	p, _ := backoff.Preset("aws-managed")
	fmt.Println(p.Name(), p.Retries())
	// Output:
	// backoff: unknown preset "aws": want one of aws-managed, customer-managed
	// aws-managed 100015
}

func ExampleScale() {
	fast := backoff.Scale(backoff.AWSManaged(), 0.001) // milliseconds for seconds
	d, _ := fast.Delay(100_015, nil)
	fmt.Println(d)
	// Output: 20ms
}
