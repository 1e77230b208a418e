package sandboxagent

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/guest"
)

func TestSuspectLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  ExecResult
		want bool
	}{
		{"success", ExecResult{ExitCode: 0}, false},
		{"plain failure", ExecResult{ExitCode: 1, Stderr: []byte("no such file")}, false},
		{"SIGKILL (OOM killer)", ExecResult{ExitCode: 137}, true},
		{"timeout", ExecResult{ExitCode: 124, TimedOut: true}, true},
		{"dash fork failure", ExecResult{ExitCode: 2, Stderr: []byte("sh: 1: Cannot fork")}, true},
		{"bash fork retry, exit 0", ExecResult{Stderr: []byte("bash: fork: retry: Resource temporarily unavailable")}, true},
		{"node spawn", ExecResult{ExitCode: 1, Stderr: []byte("Error: spawn EAGAIN")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := suspectLimits(tc.res); got != tc.want {
				t.Errorf("suspectLimits = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestResourceErrorIs(t *testing.T) {
	mem := error(&ResourceError{Resource: resourceMemory, Limit: 64 << 20, Events: 1, Cmd: "sh"})
	pids := error(&ResourceError{Resource: resourcePids, Limit: 256, Events: 9, Cmd: "sh"})
	if !errors.Is(mem, ErrOutOfMemory) || errors.Is(mem, ErrPidsLimit) {
		t.Errorf("memory error matches wrongly: %v", mem)
	}
	if !errors.Is(pids, ErrPidsLimit) || errors.Is(pids, ErrOutOfMemory) {
		t.Errorf("pids error matches wrongly: %v", pids)
	}
}

// TestRunReportsLimits drives Run over a fake engine through the three
// outcomes of a suspicious exit: a limit hit, nothing new, the container
// gone.
func TestRunReportsLimits(t *testing.T) {
	type step struct {
		code     int
		stderr   string
		counters string // output of the counters script; "gone" = container died
		bombGone bool   // the pids are free again when the bomb is looked for
		wantIs   error
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"oom once, then an ordinary SIGKILL", []step{
			{code: 137, counters: "oom 1\npids 0\n", wantIs: ErrOutOfMemory},
			{code: 137, counters: "oom 1\npids 0\n", wantIs: nil},
		}},
		{"fork failures", []step{
			{code: 2, stderr: "sh: 1: Cannot fork", counters: "oom 0\npids 40\n", wantIs: ErrPidsLimit},
		}},
		{"fork failures after the bomb is gone kill nothing", []step{
			{code: 2, stderr: "sh: 1: Cannot fork", counters: "oom 0\npids 40\n", bombGone: true, wantIs: ErrPidsLimit},
		}},
		{"plain failure reads no counters", []step{
			{code: 1, stderr: "boom", counters: "oom 9\npids 9\n", wantIs: nil},
		}},
		{"container died", []step{
			{code: 137, counters: "gone", wantIs: ErrContainerNotFound},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cur step
			var killedGroup string
			running := true
			f := &fakeRuntime{
				inspect: func(spec ContainerSpec) ContainerState {
					st := recorded(spec)
					st.Running = running
					return st
				},
			}
			f.exec = func(_ context.Context, req RuntimeExec) (int, error) {
				switch {
				case len(req.Cmd) == 3 && req.Cmd[2] == guest.Counters:
					if cur.counters == "gone" {
						running = false
						return -1, ErrContainerNotFound
					}
					io.WriteString(req.Stdout, cur.counters)
					return 0, nil
				case len(req.Cmd) > 2 && req.Cmd[2] == guest.ProcessScan:
					io.WriteString(req.Stdout, "1 (docker-init) S 0 1 1\n9 (bash) S 1 9 1\n40 (node) S 0 40 40\n")
					if killedGroup == "" && !cur.bombGone { // the bomb, until killed
						io.WriteString(req.Stdout, "self 77\ncurrent 97\n30 (sh) R 0 30 30\n31 (sh) R 1 30 30\n")
					} else {
						io.WriteString(req.Stdout, "self 78\ncurrent 3\n")
					}
					return 0, nil
				case req.Cmd[0] == "kill":
					killedGroup = req.Cmd[len(req.Cmd)-1]
					return 0, nil
				}
				io.WriteString(req.Stderr, cur.stderr)
				return cur.code, nil
			}
			sb, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img", MemoryBytes: 64 << 20, PidsLimit: 99})
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				cur = st
				res, err := sb.Exec(context.Background(), []string{"work"})
				if res.ExitCode != st.code {
					t.Errorf("step %d: exit %d, want %d", i, res.ExitCode, st.code)
				}
				if st.wantIs == nil {
					if err != nil {
						t.Errorf("step %d: unexpected error %v", i, err)
					}
					continue
				}
				if !errors.Is(err, st.wantIs) {
					t.Errorf("step %d: got %v, want %v", i, err, st.wantIs)
				}
				var re *ResourceError
				if errors.As(err, &re) {
					wantLimit := map[string]int64{resourceMemory: 64 << 20, resourcePids: 99}[re.Resource]
					if re.Limit != wantLimit || re.Cmd != "work" {
						t.Errorf("step %d: %+v", i, re)
					}
				}
			}
			wantKill := ""
			if tc.name == "fork failures" {
				wantKill = "-30" // the largest group outside the container's session
			}
			if killedGroup != wantKill {
				t.Errorf("killed group %q, want %q", killedGroup, wantKill)
			}
		})
	}
}
