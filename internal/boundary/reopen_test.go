package boundary

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// answer is a handler that answers its name.
func answer(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })
}

// get fetches url and returns the body ("" on any failure).
func get(url string) string {
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// A folder Open made, whose owner died leaving its socket files, is
// served again at the same paths; anything that is not such a folder of
// ours, a socket still served, or something else in a socket's place is
// refused.
func TestReopen(t *testing.T) {
	root, err := SocketRoot()
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(map[string]http.Handler{ServiceModel: answer("old")})
	if err != nil {
		t.Fatal(err)
	}
	dir := h.Dir()
	defer os.RemoveAll(dir)
	services := map[string]http.Handler{ServiceModel: answer("new")}
	if _, err := Reopen(dir, services); err == nil || !strings.Contains(err.Error(), "still served") {
		t.Fatalf("Reopen of a folder still served: %v", err)
	}
	// As a SIGKILLed owner leaves it: the socket file stays, nobody listens.
	for _, l := range h.servers {
		l.Close()
	}
	h.wg.Wait()
	if _, err := os.Stat(filepath.Join(dir, "model.sock")); err == nil {
		t.Log("socket file left behind, as after SIGKILL")
	} else {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "model.sock"), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
	}
	h2, err := Reopen(dir, services)
	if err != nil {
		t.Fatal(err)
	}
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, "model.sock"))
	}}, Timeout: 5 * time.Second}
	res, err := c.Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "new" {
		t.Errorf("the reopened socket answers %q", b)
	}
	if fi, err := os.Stat(filepath.Join(dir, "model.sock")); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket %v %v, want mode 0666", fi, err)
	}
	if err := h2.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Release removed the folder: %v", err)
	}

	// Something else in a socket's place.
	if err := os.WriteFile(filepath.Join(dir, "model.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Reopen(dir, services); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Reopen over a plain file: %v", err)
	}
	os.Remove(filepath.Join(dir, "model.sock"))

	// Folders that are not ours to reopen.
	link := filepath.Join(root, "s-"+strconv.Itoa(os.Getpid())+"-77")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	wrongMode, err := os.MkdirTemp(root, "s-1-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(wrongMode) // MkdirTemp's 0700, not Open's 0755
	other := t.TempDir()
	for _, bad := range []string{"", "relative/s-1-2", other, filepath.Join(root, "x-1-2"), root, dir + "/../" + filepath.Base(dir), link, wrongMode, filepath.Join(root, "s-1-404")} {
		if _, err := Reopen(bad, services); err == nil {
			t.Errorf("Reopen(%q) accepted", bad)
		} else if !strings.Contains(err.Error(), ErrNetwork.Error()) {
			t.Errorf("Reopen(%q): %v, want ErrNetwork", bad, err)
		}
	}
}

// A tunnel that listened on a port is started again on the same port for
// an adopting host, also while the dead host's tunnel still holds it for
// a moment; a port it cannot get in time fails the start.
func TestTunnelSamePorts(t *testing.T) {
	run := localPerl(t)
	open := func(name string, ports map[string]int) (*Host, error) {
		h, err := Open(map[string]http.Handler{ServiceModel: answer(name)})
		if err != nil {
			t.Fatal(err)
		}
		h.UsePorts(ports)
		if err := h.StartTunnel(context.Background(), run); err != nil {
			h.Close()
			return nil, err
		}
		return h, nil
	}
	first, err := open("first", nil)
	if err != nil {
		t.Fatal(err)
	}
	port := first.Port(ServiceModel)
	go func() {
		time.Sleep(time.Second)
		first.Close() // the dead host's tunnel ends with its stdin
	}()
	second, err := open("second", map[string]int{ServiceModel: port})
	if err != nil {
		t.Fatalf("tunnel on the same port: %v", err)
	}
	defer second.Close()
	if second.Port(ServiceModel) != port {
		t.Fatalf("port %d, want %d", second.Port(ServiceModel), port)
	}
	if got := get(second.URL(ServiceModel)); got != "second" {
		t.Errorf("through the tunnel: %q", got)
	}
	if testing.Short() {
		return
	}
	// Held for good (the second tunnel lives on): refused after its wait.
	if h, err := open("third", map[string]int{ServiceModel: port}); err == nil {
		h.Close()
		t.Fatal("a tunnel started on a port another one holds")
	} else if !strings.Contains(err.Error(), "listen for model") {
		t.Errorf("error %v, want the listen failure", err)
	}
}

// relayPerl is an Exec that runs forward.pl on this host, its sockets
// read from dir instead of the sandbox's mount.
func relayPerl(t *testing.T, dir string) Exec {
	t.Helper()
	perl := needPerl(t)
	return func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
		args = append([]string(nil), args...)
		for i := range args[3:] {
			args[3+i] = strings.Replace(args[3+i], SocketDir, dir, 1)
		}
		cmd := exec.CommandContext(ctx, perl, args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), nil
		}
		return 0, err
	}
}

// killListener kills the processes holding the TCP listener on
// 127.0.0.1:port (the relay daemon: perl's $0 clobbers its environment,
// so no marker there would survive).
func killListener(port int) int {
	data, _ := os.ReadFile("/proc/net/tcp")
	want := fmt.Sprintf("0100007F:%04X", port)
	inode := ""
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 9 && f[1] == want && f[3] == "0A" {
			inode = f[9]
		}
	}
	if inode == "" {
		return 0
	}
	n := 0
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err != nil || l != "socket:["+inode+"]" {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(fd, "/")[2])
		if err == nil && pid != os.Getpid() && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// The bind-mount relay (forward.pl) outlives the host that started it:
// an adopting host reopens the sockets and runs the relay with the same
// ports, which leaves a port to the live relay (it dials the socket
// afresh per connection, so it reaches the new host) and listens again
// where the relay died.
func TestRelaySamePorts(t *testing.T) {
	h, err := Open(map[string]http.Handler{ServiceModel: answer("first")})
	if err != nil {
		t.Fatal(err)
	}
	dir := h.Dir()
	defer os.RemoveAll(dir)
	run := relayPerl(t, dir)
	if err := h.Relay(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	port := h.Port(ServiceModel)
	t.Cleanup(func() { killListener(port) })
	if got := get(h.URL(ServiceModel)); got != "first" {
		t.Fatalf("through the relay: %q", got)
	}
	h.Release() // the host dies, leaving its folder; its relay lives on

	reopen := func(name string) *Host {
		t.Helper()
		h, err := Reopen(dir, map[string]http.Handler{ServiceModel: answer(name)})
		if err != nil {
			t.Fatal(err)
		}
		h.UsePorts(map[string]int{ServiceModel: port})
		if err := h.Relay(context.Background(), run); err != nil {
			t.Fatal(err)
		}
		if h.Port(ServiceModel) != port {
			t.Fatalf("port %d, want %d", h.Port(ServiceModel), port)
		}
		return h
	}
	h2 := reopen("second")
	if got := get(h2.URL(ServiceModel)); got != "second" {
		t.Errorf("the live relay reaches the reopened socket: %q", got)
	}
	h2.Release()
	if killListener(port) == 0 {
		t.Fatal("no relay daemon to kill")
	}
	time.Sleep(100 * time.Millisecond)
	h3 := reopen("third")
	defer h3.Close()
	if got := get(h3.URL(ServiceModel)); got != "third" {
		t.Errorf("the restarted relay: %q", got)
	}
}

// Relayed believes a live relay only when root listens on every port the
// CLI knows; anything less leaves the ports unset for Relay to judge.
func TestRelayed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		want      map[string]int
		listeners map[int]int
		ok        bool
	}{
		{"root holds both", map[string]int{ServiceModel: 4000, ServiceEgress: 4001}, map[int]int{4000: 0, 4001: 0, 22: 1000}, true},
		{"one port free", map[string]int{ServiceModel: 4000, ServiceEgress: 4001}, map[int]int{4000: 0}, false},
		{"the user squats", map[string]int{ServiceModel: 4000, ServiceEgress: 4001}, map[int]int{4000: 0, 4001: 1000}, false},
		{"no port known", map[string]int{}, map[int]int{4000: 0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Open(map[string]http.Handler{ServiceModel: answer("m"), ServiceEgress: answer("e")})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			h.UsePorts(tc.want)
			if got := h.Relayed(tc.listeners); got != tc.ok {
				t.Fatalf("Relayed = %v, want %v", got, tc.ok)
			}
			for _, n := range []string{ServiceModel, ServiceEgress} {
				want := 0
				if tc.ok {
					want = tc.want[n]
				}
				if h.Port(n) != want {
					t.Errorf("Port(%s) = %d, want %d", n, h.Port(n), want)
				}
			}
		})
	}
}
