package boundary

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// localPerl is an Exec whose perl runs the real tunnel.pl on this host,
// wired to the exec's stdio as a cluster's exec would: the test's HTTP
// client plays the sandbox's CLI.
func localPerl(t *testing.T) Exec {
	t.Helper()
	perl := needPerl(t)
	return func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
		if args[0] != "perl" {
			return 0, nil
		}
		cmd := exec.CommandContext(ctx, perl, args[1:]...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// Not cmd.Stdin: Wait would wait for the copy from stdin, which
		// ends only with the host's side, not when perl exits (a cluster's
		// exec returns then).
		w, err := cmd.StdinPipe()
		if err != nil {
			return -1, err
		}
		if err := cmd.Start(); err != nil {
			return -1, err
		}
		go func() {
			io.Copy(w, stdin)
			w.Close()
		}()
		err = cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), nil
		}
		if err != nil && ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return 0, err
	}
}

// openTunnel serves mux as the model service and starts the tunnel to it.
func openTunnel(t *testing.T, mux http.Handler) *Host {
	t.Helper()
	run := localPerl(t)
	h, err := Open(map[string]http.Handler{ServiceModel: mux})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StartTunnel(context.Background(), run); err != nil {
		h.Close()
		t.Fatal(err)
	}
	return h
}

// Through the exec tunnel, requests (plain, with a body, streamed, many
// at once) reach the host's handler and come back whole; Close ends it.
func TestTunnelCarriesHTTP(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write(big) })
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	})
	h := openTunnel(t, mux)
	defer h.Close()
	base := h.URL(ServiceModel)
	client := &http.Client{Timeout: 20 * time.Second}

	res, err := client.Post(base+"/echo", "text/plain", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Equal(got, big) {
		t.Fatalf("echo: %d bytes back of %d", len(got), len(big))
	}

	res, err = client.Get(base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	var lines []string
	for sc.Scan() {
		if sc.Text() != "" {
			lines = append(lines, sc.Text())
		}
	}
	res.Body.Close()
	if strings.Join(lines, ",") != "data: 0,data: 1,data: 2" {
		t.Fatalf("stream: %q", lines)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := client.Get(base + "/big")
			if err != nil {
				errs <- err
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if !bytes.Equal(b, big) {
				errs <- fmt.Errorf("big: %d bytes", len(b))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Every connection that ended is forgotten on the host (no fd, no
	// goroutine per past connection).
	noKeepAlive := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for range 50 {
		res, err := noKeepAlive.Get(base + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	client.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for h.tunnel.openConns() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := h.tunnel.openConns(); n > 0 {
		t.Errorf("%d connections still open on the host after every client closed", n)
	}

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second); err == nil {
		c.Close()
		t.Fatal("the tunnel still listens after Close")
	}
}

// A sandbox that sends garbage (an absurd frame length) loses its tunnel,
// not the host: serve returns and every connection is reset.
func TestTunnelRefusesOversizeFrame(t *testing.T) {
	h := &Host{names: []string{ServiceModel}, ports: map[string]int{}}
	pr, pw := io.Pipe()
	tn := &tunnel{h: h, w: pw, conns: map[uint32]*tunnelConn{}, done: make(chan struct{}), cancel: func() {},
		out: make(chan []byte, 1), ctl: make(chan []byte, 1), quit: make(chan struct{}), served: make(chan struct{})}
	go io.Copy(io.Discard, pr)
	frame := []byte{frameData, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff}
	done := make(chan struct{})
	go func() {
		tn.serve(bufio.NewReader(io.MultiReader(bytes.NewReader(frame), strings.NewReader(strings.Repeat("x", 1<<16)))))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("serve kept reading an oversize frame")
	}
}

// A proxy that never reads holds a bounded amount of data on the host,
// its connection is reset after stuckProxy and the sandbox's other
// connections go on; Close returns at once even while it is stuck.
func TestTunnelStuckProxy(t *testing.T) {
	old := stuckProxy
	stuckProxy = time.Second
	defer func() { stuckProxy = old }()
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/stuck", func(w http.ResponseWriter, r *http.Request) { <-release })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := openTunnel(t, mux)
	defer close(release)
	base := h.URL(ServiceModel)
	go func() { // 64 MiB toward a handler that never reads its body
		c := &http.Client{Timeout: 30 * time.Second}
		res, err := c.Post(base+"/stuck", "application/octet-stream", io.LimitReader(zeros{}, 64<<20))
		if err == nil {
			res.Body.Close()
		}
	}()
	time.Sleep(500 * time.Millisecond)
	c := &http.Client{Timeout: 20 * time.Second}
	res, err := c.Get(base + "/ok")
	if err != nil {
		t.Fatalf("another connection behind the stuck one: %v", err)
	}
	if b, _ := io.ReadAll(res.Body); string(b) != "ok" {
		t.Fatalf("other connection read %q", b)
	}
	res.Body.Close()
	go func() { // stuck again, then Close
		res, err := c.Post(base+"/stuck", "application/octet-stream", io.LimitReader(zeros{}, 64<<20))
		if err == nil {
			res.Body.Close()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close hung behind a proxy that does not read")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
