package sandboxagent

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseCounters(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want ResourceEvents
	}{
		{"v1 and v2 lines", "oom 2\npids 17\n", ResourceEvents{OOMKills: 2, PidsLimit: 17}},
		{"nothing readable", "", ResourceEvents{}},
		{"junk from a hostile container", "oom -5\npids x\noom\n\x00\npids 99999999999999999999\n", ResourceEvents{}},
		{"unknown keys", "max 3\noom_kill 4\n", ResourceEvents{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseCounters([]byte(tc.in)); got != tc.want {
				t.Errorf("parseCounters(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseGroups(t *testing.T) {
	in := "1 (docker-init) S 0 1 1 0 -1\n" +
		"7 (bash) S 1 7 1 0 -1\n" + // the keepalive: the container's session
		"10 (sh) S 0 10 10 0 -1\n" +
		"16 (sh) R 10 10 10 0 -1\n" +
		"17 (a (b) c) S 1 10 10 0 -1\n" + // comm with spaces and parens
		"20 (node) S 0 20 20 0 -1\n" +
		"garbage\n" +
		"21 (x) S 0\n"
	want := map[int]int{10: 3, 20: 1}
	if got := parseGroups(in); !reflect.DeepEqual(got, want) {
		t.Errorf("parseGroups = %v, want %v", got, want)
	}
}

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
	mem := error(&ResourceError{Resource: ResourceMemory, Limit: 64 << 20, Events: 1, Cmd: "sh"})
	pids := error(&ResourceError{Resource: ResourcePids, Limit: 256, Events: 9, Cmd: "sh"})
	if !errors.Is(mem, ErrOutOfMemory) || errors.Is(mem, ErrPidsLimit) {
		t.Errorf("memory error matches wrongly: %v", mem)
	}
	if !errors.Is(pids, ErrPidsLimit) || errors.Is(pids, ErrOutOfMemory) {
		t.Errorf("pids error matches wrongly: %v", pids)
	}
}
