// Package cli holds what rocketry's command-line programs share: flag sets
// whose usage and errors name the command, and one-line error texts.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// NewFlagSet returns a flag set for cmd (such as "rocketry produce") whose
// usage, written to the set's output, reads "usage: CMD [flags]" and the
// flags.
func NewFlagSet(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n", cmd)
		fs.PrintDefaults()
	}
	return fs
}

// ParseFlags parses cmd's args with fs. It returns the exit status and
// false when the command must stop: 0 after -h (the usage on stdout), 2 for
// bad usage (one line on stderr naming the problem).
func ParseFlags(cmd string, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0, false
		}
		fmt.Fprintf(stderr, "%s: %s\n", cmd, OneLine(err.Error()))
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// OneLine keeps an error text to its first line, for one line on stderr.
func OneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
