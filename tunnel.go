package sandboxagent

import (
	"bufio"
	"context"
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

// Frame types (tunnel.pl's header comment is the format).
const (
	frameOpen  = 'O'
	frameData  = 'D'
	frameClose = 'C'
	frameReset = 'R'
)

// maxFrame bounds a frame's payload: tunnel.pl reads 64 KiB at most, and
// a larger length is a hostile (or broken) sandbox.
const maxFrame = 1 << 20

// tunnelQueue bounds what the host holds for one connection whose
// proxy does not read (frames of up to 64 KiB): the connection is reset
// past it, and the others go on.
const tunnelQueue = 256

type tunnel struct {
	h      *hostSide
	wmu    sync.Mutex
	w      io.WriteCloser // the exec's stdin
	cancel context.CancelFunc
	done   chan struct{}
	errMu  sync.Mutex
	err    error // why the exec ended

	mu    sync.Mutex
	conns map[uint32]*tunnelConn
}

type tunnelConn struct {
	c     *net.UnixConn
	queue chan []byte // nil entry: the sandbox closed its side
	gone  chan struct{}
	once  sync.Once
}

// startTunnel starts tunnel.pl in the sandbox, reads the ports it
// listens on, and serves its frames until the sandbox closes.
func (h *hostSide) startTunnel(ctx context.Context, s *Sandbox) error {
	args := append([]string{"perl", "-e", tunnelScript}, h.names...)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t := &tunnel{h: h, w: inW, cancel: cancel, done: make(chan struct{}), conns: map[uint32]*tunnelConn{}}
	var stderr cappedBuffer
	stderr.max = 4096
	go func() {
		defer close(t.done)
		code, err := s.rt.Exec(ectx, s.id, RuntimeExec{Cmd: args, Stdin: inR, Stdout: outW, Stderr: &stderr})
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.buf.String()))
		}
		t.errMu.Lock()
		t.err = err
		t.errMu.Unlock()
		outW.CloseWithError(io.EOF)
		inR.Close()
	}()
	br := bufio.NewReaderSize(outR, 64<<10)
	ports := make(chan error, 1)
	go func() {
		for range h.names {
			line, err := br.ReadString('\n')
			if err != nil {
				ports <- t.failure(err)
				return
			}
			name, port, ok := strings.Cut(strings.TrimSpace(line), " ")
			n, perr := strconv.Atoi(port)
			if !ok || perr != nil || n <= 0 || n > 65535 {
				ports <- fmt.Errorf("%w: tunnel printed %q", ErrNetwork, line)
				return
			}
			h.ports[name] = n
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
	<-t.done
	t.errMu.Lock()
	defer t.errMu.Unlock()
	if t.err != nil {
		if errors.Is(t.err, ErrUnsupportedByRuntime) {
			return t.err
		}
		return fmt.Errorf("%w (the image needs perl)", t.err)
	}
	return read
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
	t.mu.Unlock()
	if dup || !t.h.serves(name) {
		t.send(frameReset, id, nil)
		return
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(t.h.dir, name+".sock"), Net: "unix"})
	if err != nil {
		t.send(frameReset, id, nil)
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
				continue
			}
			if _, err := c.Write(b); err != nil {
				t.drop(id)
				t.send(frameReset, id, nil)
				return
			}
		}
	}()
	go func() { // proxy → sandbox
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if !t.send(frameData, id, buf[:n]) {
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					t.send(frameClose, id, nil)
				} else {
					t.send(frameReset, id, nil)
				}
				return
			}
		}
	}()
}

func (t *tunnel) toProxy(id uint32, b []byte) {
	t.mu.Lock()
	tc := t.conns[id]
	t.mu.Unlock()
	if tc == nil {
		return
	}
	select {
	case tc.queue <- b:
	case <-tc.gone:
	default: // the proxy does not read: give up on this connection only
		t.drop(id)
		t.send(frameReset, id, nil)
	}
}

// drop closes one connection (both ways).
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

// send writes one frame to the sandbox; false once the tunnel is gone.
func (t *tunnel) send(typ byte, id uint32, data []byte) bool {
	var hdr [9]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:5], id)
	binary.BigEndian.PutUint32(hdr[5:9], uint32(len(data)))
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if _, err := t.w.Write(hdr[:]); err != nil {
		return false
	}
	if len(data) > 0 {
		if _, err := t.w.Write(data); err != nil {
			return false
		}
	}
	return true
}

// close ends the tunnel: stdin closes (tunnel.pl exits), then the exec
// is hung up if it has not ended within a moment.
func (t *tunnel) close() {
	t.wmu.Lock()
	t.w.Close()
	t.wmu.Unlock()
	select {
	case <-t.done:
	case <-time.After(2 * time.Second):
	}
	t.cancel()
	<-t.done
	t.resetAll()
}
