// Package bounded holds the writers the host reads a sandbox's output
// through: whatever a sandbox prints, they keep at most a fixed number of
// bytes.
package bounded

import (
	"bytes"
	"io"
)

// Buffer keeps the first Max bytes written and notes that more came.
type Buffer struct {
	Max       int64
	buf       bytes.Buffer
	truncated bool
}

func (c *Buffer) Write(p []byte) (int, error) {
	room := c.Max - int64(c.buf.Len())
	if room <= 0 {
		if len(p) > 0 {
			c.truncated = true
		}
		return len(p), nil
	}
	if int64(len(p)) > room {
		c.buf.Write(p[:room])
		c.truncated = true
		return len(p), nil
	}
	return c.buf.Write(p)
}

// Bytes are the kept bytes (valid until the next Write or Reset).
func (c *Buffer) Bytes() []byte { return c.buf.Bytes() }

// Truncated reports whether bytes beyond Max were dropped.
func (c *Buffer) Truncated() bool { return c.truncated }

// Reset empties the buffer.
func (c *Buffer) Reset() {
	c.buf.Reset()
	c.truncated = false
}

// Tee writes to Capture and to an optional Live writer; a failing live
// writer is dropped so the output is still captured.
type Tee struct {
	Capture *Buffer
	Live    io.Writer
}

func (t *Tee) Write(p []byte) (int, error) {
	t.Capture.Write(p)
	if t.Live != nil {
		if _, err := t.Live.Write(p); err != nil {
			t.Live = nil
		}
	}
	return len(p), nil
}

// Lines cuts a byte stream into lines for Fn, holding at most Max bytes
// of one line; the rest of an overlong line is dropped and Fn is told
// (cut). Flush hands over a last line without a newline.
type Lines struct {
	Max int
	Fn  func(line []byte, cut bool)
	buf []byte
	cut bool
}

func (l *Lines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := l.Max - len(l.buf); room < len(chunk) {
			l.buf = append(l.buf, chunk[:max(room, 0)]...)
			l.cut = true
		} else {
			l.buf = append(l.buf, chunk...)
		}
		if i < 0 {
			break
		}
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

func (l *Lines) emit() {
	l.Fn(l.buf, l.cut)
	l.buf = l.buf[:0]
	l.cut = false
}

// Flush hands over the last line when it has no newline.
func (l *Lines) Flush() {
	if len(l.buf) > 0 || l.cut {
		l.emit()
	}
}
