package sandboxagent

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

// tunnelRuntime is a fakeRuntime without bind mounts whose perl execs run
// the real tunnel.pl on this host, wired to the exec's stdio as a
// cluster's exec would: the test's HTTP client plays the sandbox's CLI.
type tunnelRuntime struct{ *fakeRuntime }

func (tunnelRuntime) Features() RuntimeFeatures { return RuntimeFeatures{} }

func newTunnelRuntime(t *testing.T) tunnelRuntime {
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("no perl on this host")
	}
	f := &fakeRuntime{exec: func(ctx context.Context, req RuntimeExec) (int, error) {
		if req.Cmd[0] != "perl" {
			return 0, nil
		}
		cmd := exec.CommandContext(ctx, perl, req.Cmd[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), nil
		}
		if err != nil && ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return 0, err
	}}
	return tunnelRuntime{f}
}

// A runtime that cannot mount the host's sockets gets the exec tunnel:
// no mount in the spec; requests (plain, with a body, streamed, many at
// once) reach the host's handler and come back whole; Close ends it.
func TestTunnelCarriesHTTP(t *testing.T) {
	rt := newTunnelRuntime(t)
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
	sb, err := NewSandbox(context.Background(), rt, SandboxOptions{Image: "img", Config: DefaultConfig(),
		services: map[string]http.Handler{serviceModel: mux}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if m := rt.created[0].Mounts; len(m) != 0 {
		t.Fatalf("mounts %v on a runtime without bind mounts", m)
	}
	base := sb.host.url(serviceModel)
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

	if err := sb.Close(); err != nil {
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
	h := &hostSide{names: []string{serviceModel}, ports: map[string]int{}}
	pr, pw := io.Pipe()
	tn := &tunnel{h: h, w: pw, conns: map[uint32]*tunnelConn{}, done: make(chan struct{}), cancel: func() {}}
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
