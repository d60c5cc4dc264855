// Command rocketry runs the demo, the bundled test broker, and tools around
// producers: schedule, produce, consume, stats, replay.
//
// Usage:
//
//	rocketry <command> [flags]
//
// Run "rocketry help" for the list of commands, and
// "rocketry <command> -h" for a command's flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// command is one subcommand. run gets the arguments after the command name
// and returns the process exit status: 0 for success, 1 for a failure while
// running, 2 for bad usage (an invalid flag, policy or argument).
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands is filled by register, from each command's own file.
var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("rocketry: command registered twice: " + c.name)
	}
	commands[c.name] = c
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
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rocketry: unknown command %q; run \"rocketry help\" for the list\n", args[0])
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

// parseFlags parses a command's args with fs. It returns the exit status
// and false when the command must stop: 0 after -h (the usage on stdout),
// 2 for bad usage (one line on stderr naming the problem).
func parseFlags(name string, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0, false
		}
		fmt.Fprintf(stderr, "rocketry %s: %s\n", name, oneLine(err.Error()))
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rocketry %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// newFlagSet returns a flag set for command name whose usage, written to the
// set's output, reads "usage: rocketry NAME [flags]" and the flags.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rocketry %s [flags]\n", name)
		fs.PrintDefaults()
	}
	return fs
}

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

// oneLine keeps an error text to its first line, for one line on stderr.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: rocketry <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nrun \"rocketry <command> -h\" for a command's flags")
}
