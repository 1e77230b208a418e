package runtimetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/gc"
)

// gc: GC removes a sandbox of ours whose owner process on this host is
// gone, and a stopped one of another host's, keeps a live one of ours
// and never touches the engine's other workloads; a dry run removes
// nothing.
func (s *suite) gc(t *testing.T) {
	ctx := ctxT(t, 5*time.Minute)
	host, _ := os.Hostname()
	run := randHex(6)
	live := s.start(t, sandboxagent.SandboxOptions{Labels: map[string]string{runLabel: run}})
	exists := s.Foreign(t)
	if !exists() {
		t.Fatal("Foreign: the workload does not exist right after its start")
	}
	// Owned by a process of this host that is gone: running, removed.
	orphan := s.create(t, ctx, map[string]string{sandboxagent.LabelHost: host, sandboxagent.LabelPID: deadPID(t), runLabel: run}, []string{"sleep", "600"}, true)
	// Owned by another host, and stopped: removed (not running).
	stopped := s.create(t, ctx, map[string]string{sandboxagent.LabelHost: "runtimetest-elsewhere-" + run, sandboxagent.LabelPID: "1", runLabel: run}, []string{"true"}, false)
	var st sandboxagent.ContainerState
	var err error
	if !poll(2*time.Minute, func() bool {
		st, err = s.Runtime.Inspect(ctx, stopped)
		return err == nil && !st.Running && st.Status == sandboxagent.StatusExited
	}) {
		t.Fatalf("a container whose command is true did not stop (AutoRemove false): %+v %v", st, err)
	}

	dry, err := gc.Run(ctx, s.Runtime, gc.Options{DryRun: true})
	if err != nil {
		t.Fatalf("GC dry run: %v", err)
	}
	if !gcHas(dry.Removed, orphan) || !gcHas(dry.Removed, stopped) {
		t.Errorf("GC dry run does not name the leftovers %s and %s: %+v", orphan, stopped, dry)
	}
	for _, id := range []string{orphan, stopped} {
		if _, err := s.Runtime.Inspect(ctx, id); err != nil {
			t.Errorf("GC dry run removed %s: %v", id, err)
		}
	}

	res, err := gc.Run(ctx, s.Runtime, gc.Options{})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	t.Logf("GC: %+v", res)
	for _, id := range []string{orphan, stopped} {
		if !gcHas(res.Removed, id) {
			t.Errorf("GC did not remove %s: %+v", id, res)
		}
		if _, err := s.Runtime.Inspect(ctx, id); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
			t.Errorf("%s still exists after GC: %v", id, err)
		}
	}
	if gcHas(res.Removed, live.ID()) || !gcHas(res.Kept, live.ID()) {
		t.Errorf("the live sandbox of a running owner was not kept: %+v", res)
	}
	if st, err := live.Inspect(ctx); err != nil || !st.Running {
		t.Errorf("live sandbox touched: %+v %v", st, err)
	}
	if _, err := live.Exec(ctx, []string{"true"}); err != nil {
		t.Errorf("live sandbox after GC: %v", err)
	}
	if !exists() {
		t.Errorf("GC touched the engine's foreign workload")
	}
}

// create makes (and starts) a container labelled as a sandbox of ours the
// way NewSandbox would, with the given labels added; removed at cleanup.
func (s *suite) create(t *testing.T, ctx context.Context, labels map[string]string, cmd []string, autoRemove bool) string {
	t.Helper()
	all := map[string]string{
		sandboxagent.LabelManaged:   "true",
		sandboxagent.LabelCreated:   strconv.FormatInt(time.Now().Unix(), 10),
		sandboxagent.LabelKeepalive: "600",
	}
	for k, v := range labels {
		all[k] = v
	}
	id, err := s.Runtime.Create(ctx, sandboxagent.ContainerSpec{
		Name: "runtimetest-leftover-" + randHex(6), Image: s.Image, Cmd: cmd, Labels: all, AutoRemove: autoRemove,
		CapDrop: []string{"ALL"}, CapAdd: sandboxagent.DefaultCaps, NoNewPrivileges: true, Init: true,
		PidsLimit: 64, MemoryBytes: 128 << 20, MemorySwap: 128 << 20, NanoCPUs: 5e8, NetworkMode: s.networkMode(),
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { s.Runtime.Remove(context.Background(), id) })
	if err := s.Runtime.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return id
}

// deadPID is the pid of a process of this host that has exited and been
// reaped.
func deadPID(t *testing.T) string {
	t.Helper()
	for range 10 {
		cmd := exec.Command("sh", "-c", "exit 0")
		if err := cmd.Run(); err != nil {
			t.Fatalf("run a short-lived process: %v", err)
		}
		pid := cmd.Process.Pid
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return strconv.Itoa(pid)
		}
	}
	t.Fatal("no dead pid found: every pid is reused at once")
	return ""
}

func gcHas(entries []gc.Entry, id string) bool {
	for _, e := range entries {
		if e.ID == id {
			return true
		}
	}
	return false
}
