package runtimetest

import (
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// seccompCalls are the system call numbers of seccomp.Denied, by
// architecture (io_uring's are the same everywhere; the older calls are
// not).
var seccompCalls = map[string]map[string]int{
	"amd64": {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 323, "bpf": 321,
		"perf_event_open": 298, "add_key": 248, "keyctl": 250, "request_key": 249},
	"arm64": {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 282, "bpf": 280,
		"perf_event_open": 241, "add_key": 217, "keyctl": 219, "request_key": 218},
}

// seccompProbe, run by perl, makes each call given as NAME=NUMBER with
// harmless arguments (one let through fails otherwise: EFAULT, EINVAL)
// and prints "NAME ERRNO"; then "vsock ERRNO" for socket(AF_VSOCK) and
// "inet ERRNO" for an ordinary TCP socket (0: it opened).
const seccompProbe = `use Socket;
for (@ARGV) {
	my ($name, $nr) = split /=/;
	$! = 0; syscall($nr, 0, 0, 0, 0, 0); printf "%s %d\n", $name, $! + 0;
}
$! = 0; socket(my $v, 40, SOCK_STREAM, 0); printf "vsock %d\n", $! + 0;
$! = 0; my $ok = socket(my $i, AF_INET, SOCK_STREAM, 0); printf "inet %d\n", $ok ? 0 : $! + 0;`

// seccomp: sandbox-agent's profile refuses each of seccomp.Denied and
// AF_VSOCK sockets with EPERM from inside the sandbox, while ordinary
// work runs; Inspect reports the profile. With EngineSeccomp the engine's
// default applies instead. A backend without the Seccomp feature
// (Kubernetes: the node's RuntimeDefault) reports none.
func (s *suite) seccomp(t *testing.T) {
	calls := seccompCalls[runtime.GOARCH]
	if calls == nil {
		t.Fatalf("no system call numbers for %s", runtime.GOARCH)
	}
	args := []string{"perl", "-e", seccompProbe}
	for _, name := range seccomp.Denied {
		args = append(args, name+"="+strconv.Itoa(calls[name]))
	}
	for _, engine := range []bool{false, true} {
		name := "sandbox-agent"
		if engine {
			name = "engine"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sb := s.start(t, sandboxagent.SandboxOptions{EngineSeccomp: engine})
			ctx := ctxT(t, 2*time.Minute)
			st, err := sb.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			applied := s.features.Seccomp && !engine
			want := ""
			if applied {
				want = seccomp.Digest(seccomp.Profile())
			}
			if st.Seccomp != want {
				t.Errorf("Inspect: seccomp %q, want %q", st.Seccomp, want)
			}
			res, err := sb.Exec(ctx, args)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("probe: %v exit %d: %s", err, res.ExitCode, res.Stderr)
			}
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
				k, v, _ := strings.Cut(line, " ")
				got[k] = v
			}
			t.Logf("errno per call: %v", got)
			if got["inet"] != "0" {
				t.Errorf("an ordinary socket: errno %s, want it opened", got["inet"])
			}
			if applied {
				for _, name := range append(slices.Clone(seccomp.Denied), "vsock") {
					if got[name] != "1" {
						t.Errorf("%s: errno %q, want 1 (EPERM)", name, got[name])
					}
				}
			}
			// Ordinary work: a pipeline of programs, a file written and read.
			out, err := sb.Exec(ctx, []string{"sh", "-c", "echo work | tr a-z A-Z > /tmp/w && cat /tmp/w && sha256sum /tmp/w >/dev/null"})
			if err != nil || string(out.Stdout) != "WORK\n" {
				t.Errorf("ordinary work: %q %v %s", out.Stdout, err, out.Stderr)
			}
		})
	}
}
