package runtimetest

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

func TestCapMask(t *testing.T) {
	// CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) FSETID(4) KILL(5) SETGID(6) SETUID(7)
	got, err := capMask(sandboxagent.DefaultCaps)
	if err != nil || got != "00000000000000fb" {
		t.Fatalf("capMask(DefaultCaps) = %q, %v; want 00000000000000fb", got, err)
	}
	if got, _ := capMask([]string{"cap_sys_admin", "CHECKPOINT_RESTORE"}); got != "0000010000200000" {
		t.Fatalf("capMask = %q", got)
	}
	if _, err := capMask([]string{"NO_SUCH"}); err == nil {
		t.Fatal("unknown capability accepted")
	}
	if got := capNames("00000000000000fb"); got != "CHOWN,DAC_OVERRIDE,FOWNER,FSETID,KILL,SETGID,SETUID" {
		t.Fatalf("capNames = %q", got)
	}
}

func TestEffectiveLimit(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      string // "path value", or "" for none
	}{
		{"v2 own", "own /sys/fs/cgroup/pids.max 300\n", "/sys/fs/cgroup/pids.max 300"},
		{"v1 own unlimited memory", "own /sys/fs/cgroup/memory/memory.limit_in_bytes 9223372036854771712\n", ""},
		{"pod level", "own /sys/fs/cgroup/pids.max max\nup /sys/fs/cgroup/kubepods/pod1/ctr/pids.max max\nup /sys/fs/cgroup/kubepods/pod1/pids.max 200\nup /sys/fs/cgroup/kubepods/pids.max 4000\n", "/sys/fs/cgroup/kubepods/pod1/pids.max 200"},
		{"duplicates and junk", "own /a 5\nown /a 7\nnoise\nup /b x\n", "/a 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := effectiveLimit(parseCgroupValues(tc.out))
			got := ""
			if ok {
				got = v.path + " " + strconv.FormatInt(v.value, 10)
			}
			if got != tc.want {
				t.Fatalf("effectiveLimit = %q, want %q", got, tc.want)
			}
		})
	}
}

// The suite links no engine client (nor a backend of ours, nor the
// Docker-bound test environment): a backend's test binary, ours or a
// third party's, pays only for its own engine.
func TestNoEngineDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		prereq.Missing(t, "go list: %v", err)
	}
	const self = "github.com/sandbox-agent/sandbox-agent/runtime/runtimetest"
	for _, dep := range strings.Fields(string(out)) {
		if dep == self {
			continue
		}
		for _, banned := range []string{"k8s.io/", "github.com/moby/", "github.com/sandbox-agent/sandbox-agent/runtime/", "github.com/sandbox-agent/sandbox-agent/internal/testenv"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("runtimetest depends on %s", dep)
			}
		}
	}
}
