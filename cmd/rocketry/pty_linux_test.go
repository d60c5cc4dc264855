package main

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// pty is a pseudo-terminal for a child's stderr: the live progress display
// shows only on a terminal. Its output is read on a goroutine, so that the
// child never blocks on a full terminal buffer.
type pty struct {
	tty  *os.File // the child's end
	ptm  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

// openPTY opens a pseudo-terminal of 160 columns; closeChild must be
// called once the child has it.
func openPTY(t *testing.T) *pty {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		ptm.Close()
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		ptm.Close()
		t.Fatalf("pty number: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ptm.Close()
		t.Fatalf("open pty: %v", err)
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 160}); err != nil {
		t.Fatalf("pty size: %v", err)
	}
	p := &pty{tty: tty, ptm: ptm, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			n, err := ptm.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil { // EIO once the child and closeChild closed the tty
				return
			}
		}
	}()
	t.Cleanup(func() {
		p.tty.Close()
		ptm.Close()
		<-p.done
	})
	return p
}

// closeChild closes this process's copy of the child's end, so that the
// reader ends when the child exits.
func (p *pty) closeChild() { p.tty.Close() }

// output returns what the child wrote, once it has exited.
func (p *pty) output() string {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}
