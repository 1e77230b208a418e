package guest

import (
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// AdoptSettle, run here by /bin/sh, kills the tagged processes (and no
// other) and lists real listeners with their uid: on 127.0.0.1 and on
// IPv6's any address (a squatter could listen there too).
func TestAdoptSettle(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	ports := []int{port}
	if l6, err := net.Listen("tcp6", "[::]:0"); err == nil {
		defer l6.Close()
		ports = append(ports, l6.Addr().(*net.TCPAddr).Port)
	} else {
		t.Logf("no IPv6 here: %v", err)
	}
	start := func(tag string) *exec.Cmd {
		c := exec.Command("sleep", "60")
		c.Env = append(os.Environ(), "SANDBOX_AGENT_TURN="+tag)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	stale, other := start("sandbox-1"), start("sandbox-2")
	exited := make(chan error, 1)
	go func() { exited <- stale.Wait() }()
	out, err := exec.Command("/bin/sh", "-c", AdoptSettle, "sandbox-agent-settle", ExecKill, "sandbox-1", "10", "SANDBOX_AGENT_TURN", Counters).Output()
	if err != nil {
		t.Fatalf("AdoptSettle: %v\n%s", err, out)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the tagged process survived")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the process of another tag is gone: %v", err)
	}
	for _, port := range ports {
		if uid, ok := Listeners(out)[port]; !ok || uid != os.Getuid() {
			t.Errorf("listener on %d: uid %d (listed %v), want %d; output:\n%s", port, uid, ok, os.Getuid(), out)
		}
	}
}
