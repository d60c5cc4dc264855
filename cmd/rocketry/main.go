// Command rocketry runs the demo, the bundled test broker, and tools around
// producers: schedule, produce, consume, stats, spool, replay. The
// benchmarks against other retry strategies are a program of their own,
// internal/cmd/rocketry-bench, so that their contenders stay out of this one.
//
// Usage:
//
//	rocketry <command> [flags]
//
// Run "rocketry help" for the list of commands, and
// "rocketry <command> -h" for a command's flags.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/rocketry-go/rocketry/internal/cli"
)

// command is one subcommand. run gets the arguments after the command name
// and returns the process exit status: 0 for success, 1 for a failure while
// running, 2 for bad usage (an invalid flag, policy or argument).
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands are rocketry's commands, in the order "rocketry help" lists
// them: every command is here, and nowhere else.
var commands = []command{
	{name: "demo", summary: "send messages through throttling, faults and a broker restart, and show that none is lost", run: runDemo},
	{name: "broker", summary: "run the test broker (throttling and faults) until SIGINT/SIGTERM", run: runBroker},
	{name: "produce", summary: "send messages (stdin lines or generated) to a broker and print a summary", run: runProduce},
	{name: "consume", summary: "read a topic as a consumer group (rate, reset offset) from a broker", run: runConsume},
	{name: "stats", summary: "print a broker's stats (stored, duplicates, copies, throttled, backlog, storage load)", run: runStats},
	{name: "schedule", summary: "print (or plot) the retry schedule of a backoff or delivery policy", run: runSchedule},
	{name: "spool", summary: "look inside a dead-letter store (ls, show, stats), check or salvage a damaged one, or import an old spool file", run: runSpool},
	{name: "replay", summary: "resend a dead-letter store to a broker, removing what is stored", run: runReplay},
}

// lookup returns the command called name.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "rocketry: unknown command %q; run \"rocketry help\" for the list\n", args[0])
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

// parseFlags parses the args of command name with fs (cli.ParseFlags).
func parseFlags(name string, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
	return cli.ParseFlags("rocketry "+name, fs, args, stdout, stderr)
}

// newFlagSet returns a flag set for command name (cli.NewFlagSet).
func newFlagSet(name string) *flag.FlagSet { return cli.NewFlagSet("rocketry " + name) }

// addrEnv names the environment variable that, when set, replaces
// 127.0.0.1:7777 as the default of --addr and of the broker's --listen.
const addrEnv = "ROCKETRY_ADDR"

// defaultAddr is the address --addr defaults to in every command, and the
// one "rocketry broker" listens on by default: $ROCKETRY_ADDR, else
// 127.0.0.1:7777.
func defaultAddr() string {
	if a := getenv(addrEnv); a != "" {
		return a
	}
	return "127.0.0.1:7777"
}

// cleanError is err as one line for stderr after "rocketry NAME: ": the
// first line, without the package prefixes that each layer adds
// ("producer: ...: producer: ...") and with a gRPC status read as its code
// and message ("DeadlineExceeded: attempt timeout exceeded").
func cleanError(err error) string {
	s := oneLine(err.Error())
	s = strings.ReplaceAll(s, "producer: ", "")
	s = strings.ReplaceAll(s, "broker: ", "")
	return grpcStatusText.ReplaceAllString(s, "$1: ")
}

// grpcStatusText matches the text grpc-go gives a status error.
var grpcStatusText = regexp.MustCompile(`rpc error: code = (\w+) desc = `)

// oneLine keeps an error text to its first line (cli.OneLine).
func oneLine(s string) string { return cli.OneLine(s) }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: rocketry <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nrun \"rocketry <command> -h\" for a command's flags")
}
