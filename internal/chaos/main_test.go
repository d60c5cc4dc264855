package chaos_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/rocketry-go/rocketry/broker"
)

func TestMain(m *testing.M) {
	if os.Getenv(brokerProcessEnv) != "" {
		os.Exit(brokerProcess())
	}
	if os.Getenv(storeProcessEnv) != "" {
		os.Exit(storeProcess())
	}
	goleak.VerifyTestMain(m)
}

// brokerProcessEnv makes the test binary a broker process (for the load
// test, so that what the broker stores is not in the measured heap): it
// serves on 127.0.0.1:0 with MaxBacklog from the variable's value, prints
// its address on stdout, and stops when stdin closes.
const brokerProcessEnv = "ROCKETRY_CHAOS_BROKER_PROCESS"

func brokerProcess() int {
	maxBacklog, _ := strconv.ParseInt(os.Getenv(brokerProcessEnv), 10, 64)
	b, err := broker.New(broker.WithThrottle(broker.Throttle{MaxBacklog: maxBacklog}), broker.WithDedupWindow(200_000, 0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(b.Addr())
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	b.Stop()
	return 0
}
