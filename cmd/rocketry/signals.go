package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rocketry-go/rocketry/producer"
)

// How a long command (produce, replay, demo) is stopped: the first SIGINT
// or SIGTERM, or the end of --timeout, stops it taking new messages; the
// sends in flight get --grace to finish before Close cancels them (each
// then goes to the spool, or is reported); the summary is printed. A
// second signal exits at once, after the exit hooks (clear the progress
// display, remove temporary files).

// Why a command stopped before the end of its input: context.Cause of
// stopper.ctx.
var (
	errInterrupted = errors.New("interrupted by a signal")
	errTimedOut    = errors.New("--timeout reached")
)

// exitInterrupted is the exit status after a signal, as a shell reports
// a command ended by SIGINT.
const exitInterrupted = 130

// defaultGrace is the default of --grace.
const defaultGrace = 10 * time.Second

// signalContext is the context commands that run until interrupted stop
// on; tests replace it.
var signalContext = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// exitNow ends the process on a second signal; tests that run commands in
// process never send one.
var exitNow = os.Exit

// stopper watches for the signals and the timeout of one command run.
type stopper struct {
	// ctx ends at the first signal (cause errInterrupted) or when the
	// timeout passes (cause errTimedOut).
	ctx    context.Context
	cancel context.CancelCauseFunc
	name   string
	stderr io.Writer
	sigs   chan os.Signal
	timer  *time.Timer // of the timeout; nil without one
	quit   chan struct{}
	wg     sync.WaitGroup

	signalled atomic.Bool // a signal came, before or after the timeout

	mu      sync.Mutex
	hooks   []func()          // run before exiting on a second signal
	onStops []func(why error) // run when the command is stopped
}

// watchStop starts watching for SIGINT and SIGTERM, and for timeout when
// it is > 0. stop must be called when the command ends.
func watchStop(name string, timeout time.Duration, stderr io.Writer) *stopper {
	s := &stopper{name: name, stderr: stderr, sigs: make(chan os.Signal, 2), quit: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	signal.Notify(s.sigs, os.Interrupt, syscall.SIGTERM)
	var deadline <-chan time.Time
	if timeout > 0 {
		s.timer = time.NewTimer(timeout)
		deadline = s.timer.C
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for signals := 0; ; {
			select {
			case <-s.quit:
				return
			case <-deadline:
				if s.ctx.Err() == nil {
					s.stopWith(errTimedOut)
				}
			case sig := <-s.sigs:
				signals++
				if signals > 1 {
					s.mu.Lock()
					hooks := s.hooks
					s.mu.Unlock()
					for i := len(hooks) - 1; i >= 0; i-- {
						hooks[i]()
					}
					fmt.Fprintf(s.stderr, "rocketry %s: %v again: exiting now\n", s.name, sig)
					exitNow(exitInterrupted)
					return
				}
				s.signalled.Store(true)
				s.stopWith(errInterrupted)
			}
		}
	}()
	return s
}

// onExit adds f to what runs before the process exits on a second
// signal; hooks run last added first.
func (s *stopper) onExit(f func()) {
	s.mu.Lock()
	s.hooks = append(s.hooks, f)
	s.mu.Unlock()
}

// onStop adds f to what runs when the command is stopped, on the
// watcher's goroutine (f must not block); f gets why.
func (s *stopper) onStop(f func(why error)) {
	s.mu.Lock()
	s.onStops = append(s.onStops, f)
	s.mu.Unlock()
}

// stopWith stops the command (a signal after the timeout only says so
// again: ctx keeps its first cause).
func (s *stopper) stopWith(why error) {
	s.cancel(why)
	s.mu.Lock()
	fs := s.onStops
	s.mu.Unlock()
	for _, f := range fs {
		f(why)
	}
}

// stoppingNote is what a command says when it is stopped: why, and what
// happens to the sends in flight.
func stoppingNote(why error, grace time.Duration, spool bool) string {
	after := "then they are cancelled"
	if spool {
		after = "then they go to the spool"
	}
	s := fmt.Sprintf("%v: no new messages; the sends in flight get --grace %v, %s", why, grace, after)
	if errors.Is(why, errInterrupted) {
		s += " (a second signal exits at once)"
	}
	return s
}

// why is nil while the command runs to the end of its input, else
// errInterrupted or errTimedOut.
func (s *stopper) why() error {
	if s.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

// interrupted reports whether a signal came: the command exits 130.
func (s *stopper) interrupted() bool { return s.signalled.Load() }

// graceContext returns a context that ends grace after the command is
// stopped (never, when it is not): the Close of its producer gives the
// sends in flight that long.
func (s *stopper) graceContext(grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(s.ctx, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	return ctx, func() { stop(); cancel() }
}

// stop ends the watch: signals get their default action again. ctx keeps
// its state, so why still says how the command stopped.
func (s *stopper) stop() {
	signal.Stop(s.sigs)
	if s.timer != nil {
		s.timer.Stop()
	}
	close(s.quit)
	s.wg.Wait()
}

// closeWhen closes p once the command stops taking messages: when it is
// stopped (a signal, the timeout) or when inputDone is closed, whichever
// comes first. Close gives the sends in flight grace after a stop, then
// cancels them (each goes to the spool, or fails with producer.ErrClosed).
// The returned function waits for Close and returns its error.
func (s *stopper) closeWhen(p *producer.Producer, inputDone <-chan struct{}, grace time.Duration) func() error {
	graceCtx, cancel := s.graceContext(grace)
	errc := make(chan error, 1)
	go func() {
		select {
		case <-inputDone:
		case <-s.ctx.Done():
		}
		errc <- p.Close(graceCtx)
	}()
	return func() error {
		err := <-errc
		cancel()
		return err
	}
}
