package seccomp

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	moby "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var update = flag.Bool("update", false, "rewrite sandbox-agent.json from the profiles module")

// generate is the profile: Moby's default without Denied.
func generate(t *testing.T) []byte {
	t.Helper()
	p := moby.DefaultProfile()
	kept := p.Syscalls[:0]
	for _, sc := range p.Syscalls {
		sc.Names = slices.DeleteFunc(slices.Clone(sc.Names), func(n string) bool { return slices.Contains(Denied, n) })
		if len(sc.Names) > 0 {
			kept = append(kept, sc)
		}
	}
	p.Syscalls = kept
	out, err := json.MarshalIndent(p, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// The file is what the profiles module and Denied make.
func TestProfile(t *testing.T) {
	want := generate(t)
	if *update {
		if err := os.WriteFile("sandbox-agent.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(Profile(), want) {
		t.Fatal("sandbox-agent.json is not what the profiles module and Denied make: go test ./seccomp -update")
	}
}

// What the profile says, read back as an engine reads it: EPERM by
// default, no rule allows a denied call, and socket is allowed only by
// its domain, never for a denied domain.
func TestProfileDenies(t *testing.T) {
	var p moby.Seccomp
	if err := json.Unmarshal(Profile(), &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 1 {
		t.Errorf("default action %s (errno %v), want SCMP_ACT_ERRNO with EPERM", p.DefaultAction, p.DefaultErrnoRet)
	}
	allowed := map[string]bool{}
	for _, sc := range p.Syscalls {
		if sc.Action != specs.ActAllow {
			continue
		}
		for _, n := range sc.Names {
			allowed[n] = true
			if slices.Contains(Denied, n) {
				t.Errorf("%s is allowed (%+v)", n, sc)
			}
			if n != "socket" {
				continue
			}
			if len(sc.Args) != 1 || sc.Args[0].Index != 0 {
				t.Errorf("socket allowed without a domain condition: %+v", sc.Args)
				continue
			}
			a := sc.Args[0]
			for _, d := range DeniedDomains {
				if matches(a, d) {
					t.Errorf("socket allowed for domain %d by %+v", d, a)
				}
			}
		}
	}
	// A positive control: what every agent's work needs is allowed.
	for _, n := range []string{"read", "write", "openat", "execve", "clone", "socket", "connect", "mmap", "futex", "epoll_wait"} {
		if !allowed[n] {
			t.Errorf("%s is not allowed", n)
		}
	}
}

// matches says whether a rule's condition on one argument lets value
// through (every comparison the profile format has).
func matches(a specs.LinuxSeccompArg, value uint64) bool {
	switch a.Op {
	case specs.OpEqualTo:
		return value == a.Value
	case specs.OpNotEqual:
		return value != a.Value
	case specs.OpLessThan:
		return value < a.Value
	case specs.OpLessEqual:
		return value <= a.Value
	case specs.OpGreaterThan:
		return value > a.Value
	case specs.OpGreaterEqual:
		return value >= a.Value
	case specs.OpMaskedEqual:
		return value&a.Value == a.ValueTwo
	}
	return true // an operator unknown here: assume the worst
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		arg   specs.LinuxSeccompArg
		value uint64
		want  bool
	}{
		{specs.LinuxSeccompArg{Op: specs.OpEqualTo, Value: 40}, 40, true},
		{specs.LinuxSeccompArg{Op: specs.OpNotEqual, Value: 16}, 40, true},
		{specs.LinuxSeccompArg{Op: specs.OpLessThan, Value: 40}, 40, false},
		{specs.LinuxSeccompArg{Op: specs.OpGreaterEqual, Value: 41}, 40, false},
		{specs.LinuxSeccompArg{Op: specs.OpMaskedEqual, Value: 0xff, ValueTwo: 40}, 40, true},
	} {
		if got := matches(tc.arg, tc.value); got != tc.want {
			t.Errorf("%+v on %d: %v, want %v", tc.arg, tc.value, got, tc.want)
		}
	}
}

// A profile's digest ignores the JSON's whitespace (the docker CLI and an
// engine may compact it), not its content.
func TestDigest(t *testing.T) {
	a := Digest([]byte("{\n\t\"defaultAction\": \"SCMP_ACT_ERRNO\"\n}\n"))
	if b := Digest([]byte(`{"defaultAction":"SCMP_ACT_ERRNO"}`)); a != b || !strings.HasPrefix(a, "sha256:") {
		t.Errorf("digests %s and %s of one profile", a, b)
	}
	if c := Digest([]byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`)); c == a {
		t.Error("two profiles, one digest")
	}
	if Digest(nil) != "" {
		t.Error("no profile has a digest")
	}
}
