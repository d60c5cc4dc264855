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
	"fmt"
	"io"
	"os"
	"sort"
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
