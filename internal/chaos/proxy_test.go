package chaos_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// holdProxy forwards TCP connections from 127.0.0.1:0 to a target. While
// held, the target's bytes are not passed on to the clients (they wait in
// the proxy, in order, and flow again when released): a request reaches
// the broker and is stored, but its answer does not come back in time, as
// when the network's way back is slow or a broker stalls after storing.
type holdProxy struct {
	lis    net.Listener
	target string
	held   gate

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startHoldProxy(t testing.TB, target string) *holdProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{lis: lis, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holdProxy) Addr() string { return p.lis.Addr().String() }

func (p *holdProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			s.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.copyBack(c, s)
			c.Close()
		}()
	}
}

// copyBack passes the target's bytes to the client, waiting while held.
func (p *holdProxy) copyBack(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			p.held.wait()
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holdProxy) close() {
	p.held.Store(false)
	p.lis.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// gate holds its waiters while it is held (Store(true)) and lets them go
// when it is released (Store(false)).
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed on release; nil while not held
}

// Store holds the gate (true) or releases it (false).
func (g *gate) Store(held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case held && g.open == nil:
		g.open = make(chan struct{})
	case !held && g.open != nil:
		close(g.open)
		g.open = nil
	}
}

// wait returns when the gate is not held.
func (g *gate) wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}
