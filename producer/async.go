package producer

import "context"

// SendAsync starts sending m and returns at once. It returns nil when the
// send was accepted (m.ID is set by then): cb (if not nil) then runs exactly
// once, later, with the receipt or the error, exactly as Send would return
// them (retries, fallback and spool included). cb runs on the producer
// goroutine that made the send, which holds one of the MaxInFlight slots
// until cb returns: cb must not block, and a panic in it crashes the program
// as in any goroutine.
//
// At most MaxInFlight async sends are in flight (WithMaxInFlight); when that
// many are, SendAsync waits for room within ctx. A non-nil error means the
// send was refused and cb never runs: ErrClosed, an error wrapping
// ErrInvalidMessage, or ctx's error when ctx ended before there was room.
// ctx also bounds the send itself, as Send's does.
func (p *Producer) SendAsync(ctx context.Context, m *Message, cb func(*SendReceipt, error)) error {
	if err := p.prepare(m); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !p.enter() {
		return ErrClosed
	}
	select {
	case p.sem <- struct{}{}:
	default:
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			p.leave()
			return ctx.Err()
		case <-p.closing:
			p.leave()
			return ErrClosed
		}
	}
	go p.runAsync(ctx, m, cb)
	return nil
}

// TrySendAsync is SendAsync with context.Background() that never waits:
// when MaxInFlight async sends are in flight it fails at once with
// ErrBufferFull.
func (p *Producer) TrySendAsync(m *Message, cb func(*SendReceipt, error)) error {
	if err := p.prepare(m); err != nil {
		return err
	}
	if !p.enter() {
		return ErrClosed
	}
	select {
	case p.sem <- struct{}{}:
	default:
		p.leave()
		return ErrBufferFull
	}
	go p.runAsync(context.Background(), m, cb)
	return nil
}

// runAsync is the goroutine of one async send; it holds a slot of p.sem.
// The send's context also ends, with ErrClosed as its cause, when Close
// gives up waiting.
func (p *Producer) runAsync(ctx context.Context, m *Message, cb func(*SendReceipt, error)) {
	defer func() {
		<-p.sem
		p.leave()
	}()
	sctx := p.hardCtx
	if ctx.Done() != nil {
		c, cancel := context.WithCancelCause(ctx)
		stop := context.AfterFunc(p.hardCtx, func() { cancel(ErrClosed) })
		defer func() {
			stop()
			cancel(nil)
		}()
		sctx = c
	} else if ctx != context.Background() {
		// A context that never ends but may carry values.
		sctx = mergeValues{Context: p.hardCtx, values: ctx}
	}
	r, err := p.send(sctx, m)
	if cb != nil {
		cb(r, err)
	}
}

// mergeValues is p.hardCtx (for Done, Err, Deadline) with the values of a
// context that never ends.
type mergeValues struct {
	context.Context
	values context.Context
}

func (m mergeValues) Value(key any) any {
	if v := m.values.Value(key); v != nil {
		return v
	}
	return m.Context.Value(key) // context.Cause finds p.hardCtx's cause here
}
