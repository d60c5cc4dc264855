package deadletter

import (
	"fmt"
	"runtime/debug"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// guard runs fn, which calls the engine, on the caller's goroutine and turns
// a panic inside it, or a memory fault on its mapping of the file (a page
// past the file's end), into an error wrapping ErrCorrupt. Open checks every
// page before bbolt reads it, so this is the net under that check, not the
// check itself.
//
// It only covers the goroutine it runs on: the store never calls the parts
// of bbolt that start their own goroutines on the file's content (DB.Batch
// commits in a goroutine of its own: Put uses commits below instead;
// Tx.Check, and the freelist's rebuild when the meta says it was not
// synced, which Open refuses first).
func guard(path, op string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %s: the engine failed on a damaged page (%v); run `rocketry spool check %s`", ErrCorrupt, op, path, p, path)
		}
	}()
	return fn()
}

// commits groups the transactions of concurrent Puts into one, as
// bbolt's DB.Batch does, but runs each group on the goroutine of one of its
// callers (the leader), so that guard covers the commit too. A caller that
// finds no group running leads one: it commits every call waiting, hands
// each its result, and, when more calls came meanwhile, hands the lead to
// the first of them.
type commits struct {
	mu      sync.Mutex
	running bool
	waiting []*commitCall
}

type commitCall struct {
	fn   func(*bolt.Tx) error
	done chan commitResult // buffered: the leader never waits on it
}

type commitResult struct {
	err  error
	lead bool // no result: the caller leads the next group
}

// do runs fn in a write transaction shared with other calls, and returns
// its error or the commit's.
func (c *commits) do(s *Store, fn func(*bolt.Tx) error) error {
	call := &commitCall{fn: fn, done: make(chan commitResult, 1)}
	c.mu.Lock()
	c.waiting = append(c.waiting, call)
	lead := !c.running
	c.running = true
	c.mu.Unlock()
	for !lead {
		r := <-call.done
		if !r.lead {
			return r.err
		}
		lead = true
	}
	c.mu.Lock()
	group := c.waiting
	c.waiting = nil
	c.mu.Unlock()

	s.commitGroup(group)

	c.mu.Lock()
	if len(c.waiting) > 0 {
		c.waiting[0].done <- commitResult{lead: true} // it takes every call waiting, itself included
	} else {
		c.running = false
	}
	c.mu.Unlock()
	r := <-call.done
	return r.err
}

// commitGroup commits the calls of group in one transaction; a call whose
// fn fails is taken out and answered, and the rest tried again, as
// DB.Batch does.
func (s *Store) commitGroup(group []*commitCall) {
	for len(group) > 0 {
		failed := -1
		var ferr error
		err := guard(s.path, "put", func() error {
			return s.db.Update(func(tx *bolt.Tx) error {
				for i, c := range group {
					if err := c.fn(tx); err != nil {
						failed, ferr = i, err
						return err
					}
				}
				return nil
			})
		})
		if failed >= 0 {
			group[failed].done <- commitResult{err: ferr}
			group = append(group[:failed:failed], group[failed+1:]...)
			continue
		}
		for _, c := range group {
			c.done <- commitResult{err: err}
		}
		return
	}
}
