package safetar

import (
	"context"
	"errors"
	"io"
)

// errWireLimit is returned by source once the raw stream cap is reached.
var errWireLimit = errors.New("raw stream larger than allowed")

const sourceBufSize = 32 << 10

// source is the reader archive/tar consumes. It
//   - calls r.Read on a helper goroutine, one call at a time and only on
//     demand, so a blocked r.Read cannot outlive ctx, and r is never read
//     after Extract returns unless ctx ended while a Read was blocked;
//   - returns ctx.Err() once ctx is done;
//   - caps the raw bytes handed out at max;
//   - records whether the consumer was told io.EOF (a tar reader that reaches
//     the end of the stream without end-of-archive blocks).
type source struct {
	ctx context.Context
	r   io.Reader
	max int64

	started bool
	stopped bool
	stopCh  chan struct{}
	req     chan []byte // consumer -> helper: fill this buffer
	res     chan chunk  // helper -> consumer

	buf    []byte
	cur    []byte // unread part of buf
	err    error  // sticky error from r
	n      int64  // bytes handed out
	sawEOF bool
}

type chunk struct {
	n   int
	err error
}

func newSource(ctx context.Context, r io.Reader, max int64) *source {
	return &source{
		ctx:    ctx,
		r:      r,
		max:    max,
		stopCh: make(chan struct{}),
		req:    make(chan []byte, 1),
		res:    make(chan chunk, 1), // the helper never blocks on a reply
		buf:    make([]byte, sourceBufSize),
	}
}

func (s *source) helper() {
	for {
		select {
		case buf := <-s.req:
			n, err := s.r.Read(buf)
			if n < 0 || n > len(buf) {
				n, err = 0, errors.New("reader returned an invalid count")
			}
			s.res <- chunk{n: n, err: err}
		case <-s.stopCh:
			return
		}
	}
}

// stop releases the helper goroutine (once a blocked Read, if any, returns).
func (s *source) stop() {
	if s.started && !s.stopped {
		close(s.stopCh)
		s.stopped = true
	}
}

func (s *source) fill() error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if !s.started {
		s.started = true
		go s.helper()
	}
	s.req <- s.buf
	select {
	case <-s.ctx.Done():
		// The helper owns s.buf until its Read returns; never touch it
		// again (every later Read fails on ctx first).
		s.buf = nil
		return s.ctx.Err()
	case c := <-s.res:
		s.cur = s.buf[:c.n]
		if c.err != nil {
			s.err = c.err
		}
		return nil
	}
}

func (s *source) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(s.cur) == 0 {
		if s.err != nil {
			if s.err == io.EOF {
				s.sawEOF = true
			}
			return 0, s.err
		}
		if s.buf == nil {
			return 0, s.ctx.Err()
		}
		if err := s.fill(); err != nil {
			return 0, err
		}
	}
	if s.n >= s.max {
		return 0, errWireLimit
	}
	if rem := s.max - s.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	s.n += int64(n)
	return n, nil
}
