package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHelpListsEveryCommand: "rocketry help" lists the commands of the one
// list in main.go, in its order, each answers -h with its own usage, and a
// name that is not there is refused naming it.
func TestHelpListsEveryCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"help"}, &out, &errOut))
	help := out.String()
	last := -1
	seen := map[string]bool{}
	for _, c := range commands {
		require.False(t, seen[c.name], "command %q listed twice", c.name)
		seen[c.name] = true
		i := strings.Index(help, "\n  "+c.name+" ")
		require.Greater(t, i, last, "%q missing from help or out of order:\n%s", c.name, help)
		last = i

		var cout, cerr bytes.Buffer
		assert.Equal(t, 0, run([]string{c.name, "-h"}, &cout, &cerr), c.name)
		assert.Contains(t, cout.String(), "rocketry "+c.name, c.name)
	}
	out.Reset()
	errOut.Reset()
	assert.Equal(t, 2, run([]string{"nope"}, &out, &errOut))
	assert.Contains(t, errOut.String(), `unknown command "nope"`)
}
