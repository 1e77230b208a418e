package boundary

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The exec tunnel: for a Runtime that cannot bind-mount the host's
// sockets (Kubernetes), tunnel.pl runs in the sandbox as one long exec
// and carries every connection to the host's proxies over that exec's
// stdin and stdout; the host side dials the same Unix sockets the mount
// would have shown. It needs nothing of the network, so it works on any
// cluster and keeps the sandbox's own network policy intact.

// tunnelScript (perl) is the relay for engines that cannot mount the
// host's sockets: it carries connections of 127.0.0.1 ports over its own
// stdin and stdout.
//
//go:embed scripts/tunnel.pl
var tunnelScript string

// Frame types (tunnel.pl's header comment is the format).
const (
	frameOpen  = 'O'
	frameData  = 'D'
	frameClose = 'C'
	frameReset = 'R'
)

// maxFrame bounds a frame's payload: tunnel.pl reads 64 KiB at most, and
// a larger length is a hostile (or broken) sandbox, which loses its tunnel.
const maxFrame = 64 << 10

// What the host holds for one sandbox is bounded: frames queued per
// connection toward its proxy (serve waits while a queue is full, so a
// proxy that reads slowly slows this sandbox's tunnel, never grows the
// host's memory) and connections open at once (more are reset).
const (
	tunnelQueue    = 8
	tunnelMaxConns = 64
)

type tunnel struct {
	h      *Host
	out    chan []byte   // frames to the sandbox, written by one goroutine
	ctl    chan []byte   // resets and closes from serve, which must never wait on out
	quit   chan struct{} // closed by close(): every goroutine of the tunnel returns
	w      io.WriteCloser
	cancel context.CancelFunc
	done   chan struct{} // the exec ended
	served chan struct{} // serve returned
	errMu  sync.Mutex
	err    error // why the exec ended
	once   sync.Once

	mu    sync.Mutex
	conns map[uint32]*tunnelConn
}

type tunnelConn struct {
	c     *net.UnixConn
	queue chan []byte // nil entry: the sandbox closed its side
	gone  chan struct{}
	once  sync.Once

	mu           sync.Mutex
	rdone, wdone bool // proxy → sandbox ended; sandbox → proxy ended
}

// StartTunnel starts tunnel.pl in the sandbox, reads the ports it
// listens on, and serves its frames until the sandbox closes (or Close).
// A port set by UsePorts is listened on again, waiting a few seconds for
// the tunnel of a dead host to go (it exits when its stdin closes).
// exec runs it as one long exec that ends when its stdin closes; its
// context is cancelled by Close, not by ctx, which bounds the start only.
func (h *Host) StartTunnel(ctx context.Context, exec Exec) error {
	args := []string{"perl", "-e", tunnelScript}
	for _, n := range h.names {
		if p := h.want[n]; p > 0 {
			n += "=" + strconv.Itoa(p)
		}
		args = append(args, n)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t := &tunnel{
		h: h, w: inW, cancel: cancel, conns: map[uint32]*tunnelConn{},
		out: make(chan []byte, 16), ctl: make(chan []byte, tunnelMaxConns*2+8),
		quit: make(chan struct{}), done: make(chan struct{}), served: make(chan struct{}),
	}
	stderr := &headBuffer{max: 4096}
	go func() {
		defer close(t.done)
		code, err := exec(ectx, args, inR, outW, stderr)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.buf.String()))
		}
		t.errMu.Lock()
		t.err = err
		t.errMu.Unlock()
		outW.CloseWithError(io.EOF)
		inR.Close()
	}()
	go t.write()
	br := bufio.NewReaderSize(outR, 64<<10)
	ports := make(chan error, 1)
	go func() {
		defer close(t.served)
		for range h.names {
			line, err := br.ReadSlice('\n') // at most the buffer: a sandbox printing no newline fails here
			if err != nil {
				ports <- t.failure(err)
				return
			}
			name, port, ok := strings.Cut(strings.TrimSpace(string(line)), " ")
			n, perr := strconv.Atoi(port)
			if w := h.want[name]; !ok || perr != nil || n <= 0 || n > 65535 || !h.Serves(name) || (w > 0 && n != w) {
				ports <- fmt.Errorf("%w: tunnel printed %q", ErrNetwork, line)
				return
			}
			h.ports[name] = n
		}
		for _, n := range h.names {
			if h.ports[n] == 0 {
				ports <- fmt.Errorf("%w: tunnel reported no port for %s", ErrNetwork, n)
				return
			}
		}
		ports <- nil
		t.serve(br)
	}()
	select {
	case err := <-ports:
		if err != nil {
			t.close()
			return fmt.Errorf("%w: start the tunnel to the host's proxies: %w", ErrNetwork, err)
		}
	case <-ctx.Done():
		t.close()
		return fmt.Errorf("start the tunnel to the host's proxies: %w", ctx.Err())
	}
	h.tunnel = t
	return nil
}

// failure explains the tunnel's end: the exec's error when it has one.
func (t *tunnel) failure(read error) error {
	select {
	case <-t.done:
	case <-time.After(5 * time.Second):
		return read
	}
	t.errMu.Lock()
	defer t.errMu.Unlock()
	if t.err != nil {
		var r refused
		if errors.As(t.err, &r) {
			return r.error
		}
		return fmt.Errorf("%w (the image needs perl)", t.err)
	}
	return read
}

// write is the one writer of the exec's stdin: control frames first.
func (t *tunnel) write() {
	for {
		var f []byte
		select {
		case f = <-t.ctl:
		default:
			select {
			case f = <-t.ctl:
			case f = <-t.out:
			case <-t.quit:
				return
			}
		}
		if _, err := t.w.Write(f); err != nil {
			return
		}
	}
}

func frame(typ byte, id uint32, data []byte) []byte {
	f := make([]byte, 9+len(data))
	f[0] = typ
	binary.BigEndian.PutUint32(f[1:5], id)
	binary.BigEndian.PutUint32(f[5:9], uint32(len(data)))
	copy(f[9:], data)
	return f
}

// send queues a data or close frame toward the sandbox, waiting for room
// (backpressure on that connection's proxy); false once the tunnel or the
// connection is gone.
func (t *tunnel) send(tc *tunnelConn, typ byte, id uint32, data []byte) bool {
	select {
	case t.out <- frame(typ, id, data):
		return true
	case <-tc.gone:
	case <-t.quit:
	}
	return false
}

// control queues a reset from serve's side without ever waiting: the
// queue holds two frames per possible connection; past that the tunnel
// is being flooded and the frame is dropped (the connection is gone on
// the host either way).
func (t *tunnel) control(typ byte, id uint32) {
	select {
	case t.ctl <- frame(typ, id, nil):
	default:
	}
}

// serve reads the sandbox's frames until the exec ends.
func (t *tunnel) serve(br *bufio.Reader) {
	defer t.resetAll()
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		typ, id, n := hdr[0], binary.BigEndian.Uint32(hdr[1:5]), binary.BigEndian.Uint32(hdr[5:9])
		if n > maxFrame {
			return // not tunnel.pl's: stop listening to it
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(br, data); err != nil {
			return
		}
		switch typ {
		case frameOpen:
			t.open(id, string(data))
		case frameData:
			t.toProxy(id, data)
		case frameClose:
			t.toProxy(id, nil)
		default:
			t.drop(id)
		}
	}
}

// open dials the service's socket for a new connection of the sandbox.
func (t *tunnel) open(id uint32, name string) {
	t.mu.Lock()
	_, dup := t.conns[id]
	full := len(t.conns) >= tunnelMaxConns
	t.mu.Unlock()
	if dup || full || !t.h.Serves(name) {
		t.control(frameReset, id)
		return
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(t.h.dir, name+".sock"), Net: "unix"})
	if err != nil {
		t.control(frameReset, id)
		return
	}
	tc := &tunnelConn{c: c, queue: make(chan []byte, tunnelQueue), gone: make(chan struct{})}
	t.mu.Lock()
	t.conns[id] = tc
	t.mu.Unlock()
	go func() { // sandbox → proxy, in order
		for {
			var b []byte
			select {
			case b = <-tc.queue:
			case <-tc.gone:
				return
			}
			if b == nil {
				_ = c.CloseWrite()
				t.half(id, tc, false)
				return
			}
			if _, err := c.Write(b); err != nil {
				t.drop(id)
				t.control(frameReset, id)
				return
			}
		}
	}()
	go func() { // proxy → sandbox
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 && !t.send(tc, frameData, id, buf[:n]) {
				return
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					if t.send(tc, frameClose, id, nil) {
						t.half(id, tc, true)
					}
				} else {
					t.drop(id)
					t.control(frameReset, id)
				}
				return
			}
		}
	}()
}

// half records one direction's end; with both ended the connection is
// closed and forgotten (tunnel.pl forgets it then too).
func (t *tunnel) half(id uint32, tc *tunnelConn, read bool) {
	tc.mu.Lock()
	if read {
		tc.rdone = true
	} else {
		tc.wdone = true
	}
	both := tc.rdone && tc.wdone
	tc.mu.Unlock()
	if both {
		t.drop(id)
	}
}

// toProxy hands a frame's data (nil: the sandbox's side closed) to the
// connection's writer, waiting while its queue is full — the sandbox's
// other connections wait meanwhile — up to stuckProxy, after which that
// connection is reset and the others go on.
func (t *tunnel) toProxy(id uint32, b []byte) {
	t.mu.Lock()
	tc := t.conns[id]
	t.mu.Unlock()
	if tc == nil {
		return
	}
	select {
	case tc.queue <- b:
		return
	default:
	}
	timer := time.NewTimer(stuckProxy)
	defer timer.Stop()
	select {
	case tc.queue <- b:
	case <-tc.gone:
	case <-t.quit:
	case <-timer.C:
		t.drop(id)
		t.control(frameReset, id)
	}
}

// stuckProxy is how long a proxy may not read before its connection is
// reset (a variable for tests).
var stuckProxy = 30 * time.Second

// drop closes one connection (both ways) and forgets it.
func (t *tunnel) drop(id uint32) {
	t.mu.Lock()
	tc := t.conns[id]
	delete(t.conns, id)
	t.mu.Unlock()
	if tc != nil {
		tc.once.Do(func() {
			close(tc.gone)
			tc.c.Close()
		})
	}
}

func (t *tunnel) resetAll() {
	t.mu.Lock()
	ids := make([]uint32, 0, len(t.conns))
	for id := range t.conns {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	for _, id := range ids {
		t.drop(id)
	}
}

// openConns counts the open connections (tests).
func (t *tunnel) openConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// close ends the tunnel: stdin closes (tunnel.pl exits; a pending write
// returns at once), then the exec is hung up if it has not ended within
// a moment; every goroutine of the tunnel returns.
func (t *tunnel) close() {
	t.once.Do(func() {
		close(t.quit)
		t.w.Close()
		select {
		case <-t.done:
		case <-time.After(2 * time.Second):
		}
		t.cancel()
		<-t.done
		<-t.served
		t.resetAll()
	})
}

// Refused wraps the error of an exec the runtime would not run at all
// (not the image's fault): StartTunnel reports it as it is, without the
// hint that the image needs perl.
func Refused(err error) error { return refused{err} }

type refused struct{ error }

func (r refused) Unwrap() error { return r.error }

// headBuffer keeps the first max bytes written and drops the rest.
type headBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
