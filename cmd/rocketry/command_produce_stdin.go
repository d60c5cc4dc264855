package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
)

// line is one line of input: its number (from 1) and its bytes without
// the line end; n is 0 at the end of the input.
type line struct {
	n    int
	body []byte
	over bool  // longer than the limit: its bytes were dropped
	err  error // the input failed; no line follows
}

// readLines reads r line by line on its own goroutine, so that a read that
// blocks (a terminal, a pipe) never holds up a stop; it ends at the end of
// the input or when ctx ends. A line longer than limit bytes is dropped as
// it is read, never held whole, and reported with over; the lines after it
// are read as usual. "\r\n" ends a line as "\n" does.
func readLines(ctx context.Context, r io.Reader, limit int) <-chan line {
	out := make(chan line)
	go func() {
		defer close(out)
		br := bufio.NewReaderSize(r, 64<<10)
		for n := 1; ; n++ {
			var buf []byte
			var size int
			var err error
			for {
				var chunk []byte
				chunk, err = br.ReadSlice('\n')
				size += len(chunk)
				if size <= limit+2 { // room for "\r\n"
					buf = append(buf, chunk...)
				}
				if !errors.Is(err, bufio.ErrBufferFull) {
					break
				}
			}
			l := line{n: n}
			switch {
			case err != nil && !errors.Is(err, io.EOF):
				l.err = err
			case size == 0:
				return // the end of the input
			case size > limit+2:
				l.over = true
			default:
				l.body = bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r"))
				l.over = len(l.body) > limit
			}
			select {
			case out <- l:
			case <-ctx.Done():
				return
			}
			if l.err != nil {
				return
			}
		}
	}()
	return out
}
