package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/rocketry-go/rocketry/internal/bench"
	"github.com/rocketry-go/rocketry/internal/cli"
)

// The hidden subcommands of --fleet's child processes.
const (
	// fleetProducerArg runs one producer of the fleet:
	// "rocketry-bench __fleet-producer --addr ADDR --contender C
	// --senders S --delay D --duration D ..." builds its sender, writes
	// "ready", reads "start UNIXNANO" from stdin (the fleet's start), sends
	// until --duration after it and writes its result as one JSON line
	// (bench.ServeFleetProducer). It stops early when stdin ends.
	fleetProducerArg = "__fleet-producer"
	// hogArg spins one CPU core (GOMAXPROCS 1) until stdin ends.
	hogArg = "__hog"
)

// benchChildCommand returns the command, and the environment to add, that
// --fleet starts a child with: this binary's hidden subcommand sub
// (hintlessServerArg, fleetProducerArg or hogArg), to which the caller
// appends the subcommand's flags. Tests replace it, since their binary is
// not rocketry-bench.
var benchChildCommand = func(sub string) (argv, env []string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	return []string{exe, sub}, nil, nil
}

// runFleetMode runs --fleet: f with its commands set, the capacity
// schedule steps, the contenders of list (the default unless listSet).
func runFleetMode(ctx context.Context, f bench.Fleet, steps, list string, listSet bool, rounds int, seed uint64,
	rep *benchReport, markdown, jsonOut bool, stdout, stderr io.Writer) int {
	var err error
	if f.Steps, err = bench.ParseSteps(steps); err != nil {
		fmt.Fprintf(stderr, "rocketry-bench: %v\n", err)
		return 2
	}
	if !listSet {
		list = strings.Join(bench.FleetContenders, ",")
	}
	names, err := bench.ParseList(list, append(slices.Clone(bench.HintlessContenders), bench.RocketryNoPacing, bench.RocketryAsync))
	if err != nil {
		fmt.Fprintf(stderr, "rocketry-bench: --contenders: %v\n", err)
		return 2
	}
	if rounds < 1 {
		fmt.Fprintf(stderr, "rocketry-bench: --rounds %d: want >= 1\n", rounds)
		return 2
	}
	for _, c := range []struct {
		sub       string
		argv, env *[]string
	}{
		{hintlessServerArg, &f.Server, &f.ServerEnv},
		{fleetProducerArg, &f.Producer, &f.ProducerEnv},
		{hogArg, &f.HogCommand, &f.HogEnv},
	} {
		if *c.argv, *c.env, err = benchChildCommand(c.sub); err != nil {
			fmt.Fprintf(stderr, "rocketry-bench: --fleet: the command of %s: %v\n", c.sub, err)
			return 1
		}
	}
	f.HogEnv = append(f.HogEnv, "GOMAXPROCS=1")
	if err := f.Validate(); err != nil {
		fmt.Fprintf(stderr, "rocketry-bench: %v\n", err)
		return 2
	}
	fr, err := bench.RunFleet(ctx, f, names, rounds, seed, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rocketry-bench: --fleet: %v\n", err)
		return 1
	}
	rep.Fleet = fr
	return printBench(rep, markdown, jsonOut, stdout, stderr)
}

// runFleetProducer is the hidden subcommand fleetProducerArg.
func runFleetProducer(args []string, stdout, stderr io.Writer) int {
	cmd := "rocketry-bench " + fleetProducerArg
	fs := cli.NewFlagSet(cmd)
	def := bench.DefaultFleet()
	var p bench.FleetProducer
	fs.StringVar(&p.Addr, "addr", "", "the server's `address`")
	fs.StringVar(&p.Contender, "contender", bench.Rocketry, "the contender (see --hintless)")
	fs.IntVar(&p.Senders, "senders", def.Senders, "concurrent senders")
	fs.DurationVar(&p.Delay, "delay", 0, "when to start, after the fleet's start")
	fs.DurationVar(&p.Duration, "duration", def.Duration, "when to stop starting sends, after the fleet's start")
	fs.IntVar(&p.MaxAttempts, "attempts", def.MaxAttempts, "attempts per send, the first counted")
	fs.DurationVar(&p.SendTimeout, "send-timeout", def.SendTimeout, "the bound of one send, retries included")
	fs.IntVar(&p.BodyBytes, "body", def.BodyBytes, "the size of every body, bytes")
	fs.DurationVar(&p.Bin, "bin", def.Bin, "the width of the bins stores are counted in")
	if code, ok := cli.ParseFlags(cmd, fs, args, stdout, stderr); !ok {
		return code
	}
	if err := p.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.ServeFleetProducer(ctx, p, benchStdin, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// runHog is the hidden subcommand hogArg: one goroutine spins, on one
// processor, until stdin ends (the parent closed it, or is gone).
func runHog(args []string, stdout, stderr io.Writer) int {
	cmd := "rocketry-bench " + hogArg
	fs := cli.NewFlagSet(cmd)
	if code, ok := cli.ParseFlags(cmd, fs, args, stdout, stderr); !ok {
		return code
	}
	runtime.GOMAXPROCS(1)
	var done atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(benchStdin))
		done.Store(true)
	}()
	var n uint64
	for !done.Load() {
		n++
	}
	_ = n
	return 0
}
