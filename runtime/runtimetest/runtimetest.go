// Package runtimetest is the contract every container Runtime backend
// passes: one suite of subtests, run through the public API (NewSandbox,
// Sandbox.Run/Exec/Upload/Download/ReadFile/WriteFile/Close/Inspect, GC,
// and the Runtime itself where it is the contract), against a backend the
// caller supplies. Docker, Podman and Kubernetes pass it here; a backend
// of your own (sandboxagent.Runtime invites one) runs it the same way,
// from an integration test of its package:
//
//	//go:build integration
//
//	func TestIntegrationContract(t *testing.T) {
//		rt := ... // the backend, connected; skip (or fail under CI) when there is none
//		runtimetest.Run(t, runtimetest.Backend{
//			Runtime:     rt,
//			Image:       "debian:stable-slim",
//			Config:      cfg, // short timeouts; zero: the defaults
//			Foreign:     func(t *testing.T) func() bool { ... },
//			Unreachable: func(t *testing.T) sandboxagent.Runtime { ... },
//		})
//	}
//
// then go test -tags integration -run TestIntegrationContract ./yourengine/.
// runtime/docker/contract_integration_test.go is a complete example.
//
// What a backend lacks (sandboxagent.FeaturesOf) is not skipped: the suite
// asserts the documented downgrade instead (a typed error, or the weaker
// state), so a backend passes only by doing what it says.
//
// The package depends on the root package alone (no engine client, no
// fake: every subtest needs a live engine), so a backend's test binary
// links only its own engine's client.
package runtimetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Backend is the Runtime under test and what the suite needs around it.
// Every field but Config is required.
type Backend struct {
	// Runtime is the backend, connected to a live engine.
	Runtime sandboxagent.Runtime
	// Image is a Debian image whose user is root and working directory /,
	// with sh, bash, coreutils (setsid, mkfifo, sha256sum, mv --exchange
	// where it has one), grep and tar: testenv.Image().
	Image string
	// Config is the configuration sandboxes start with: testenv.Config()
	// style short timeouts (the zero value takes the defaults). Subtests
	// change only the download caps; keepalives are per sandbox.
	Config sandboxagent.Config
	// Foreign starts a workload of the engine that is not a sandbox of
	// ours (no LabelManaged=true; it may carry look-alike labels) and
	// returns a func reporting whether it still exists and runs. It
	// removes the workload at t's cleanup.
	Foreign func(t *testing.T) (exists func() bool)
	// Unreachable returns a Runtime of the same kind whose engine cannot
	// be reached (a socket or address nothing listens on).
	Unreachable func(t *testing.T) sandboxagent.Runtime
	// Isolation says what the backend does with egress none (see the
	// constants).
	Isolation Isolation
}

// Isolation is how a backend's sandboxes are cut off the network under
// egress none.
type Isolation int

const (
	// IsolationNoInterface: the sandbox has no network interface but lo
	// (Docker's and Podman's "none" network). The suite's sandboxes run
	// under egress none and the hardening subtest checks the interfaces.
	IsolationNoInterface Isolation = iota
	// IsolationUnenforced: the backend isolates by a policy that this
	// engine does not enforce (a Kubernetes cluster whose network plugin
	// ignores NetworkPolicy), which it detects: a sandbox under egress
	// none must fail to start with a *HardeningError naming "network",
	// leaving nothing behind; the other subtests run under egress open.
	IsolationUnenforced
	// IsolationPolicy: the backend isolates by a policy the engine
	// enforces (a Kubernetes cluster whose network plugin enforces
	// NetworkPolicy). The suite's sandboxes run under egress none and the
	// hardening subtest checks, with sandboxes listening, that an
	// isolated one reaches no other and none reaches it, while two open
	// ones reach each other.
	IsolationPolicy
)

// Run runs the contract suite against b. The subtests that drive a
// sandbox into its limits (a fork bomb, a memory hog) run first and alone;
// the others then run in parallel (each with sandboxes of its own), so Run
// returns before they finish and they finish before the calling test does.
func Run(t *testing.T, b Backend) {
	t.Helper()
	switch {
	case b.Runtime == nil:
		t.Fatal("runtimetest: Backend.Runtime is nil")
	case b.Image == "":
		t.Fatal("runtimetest: Backend.Image is empty")
	case b.Foreign == nil:
		t.Fatal("runtimetest: Backend.Foreign is nil")
	case b.Unreachable == nil:
		t.Fatal("runtimetest: Backend.Unreachable is nil")
	}
	s := &suite{Backend: b, features: sandboxagent.FeaturesOf(b.Runtime)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := b.Runtime.Info(ctx)
	if err != nil {
		t.Fatalf("runtimetest: Info: %v", err)
	}
	t.Logf("backend %s %s (API %q, rootless %v), features %+v", info.Name, info.Version, info.APIVersion, info.Rootless, s.features)

	// Serial, before the parallel ones are released.
	t.Run("limits", s.limits)
	for _, sub := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"lifecycle", s.lifecycle},
		{"exec", s.exec},
		{"timeout", s.timeout},
		{"files", s.files},
		{"download-hostile", s.hostile},
		{"keepalive", s.keepalive},
		{"gc", s.gc},
		{"hardening", s.hardening},
		{"seccomp", s.seccomp},
	} {
		t.Run(sub.name, func(t *testing.T) {
			t.Parallel()
			sub.fn(t)
		})
	}
}

type suite struct {
	Backend
	features sandboxagent.RuntimeFeatures
}

// enforcedPids is the pids limit the sandbox got, from Inspect: what it
// asked for (ask) where the backend sets one per sandbox, else the node's,
// which must be as strict or stricter.
func (s *suite) enforcedPids(t *testing.T, ctx context.Context, sb *sandboxagent.Sandbox, ask int64) int64 {
	t.Helper()
	st, err := sb.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case s.features.PidsLimit && st.PidsLimit != ask:
		t.Fatalf("Inspect: pids limit %d, asked %d", st.PidsLimit, ask)
	case st.PidsLimit <= 0 || st.PidsLimit > ask:
		t.Fatalf("Inspect: pids limit %d, want at most the %d asked", st.PidsLimit, ask)
	}
	return st.PidsLimit
}

// networkMode is what Inspect must report for a sandbox under the
// suite's egress.
func (s *suite) networkMode() string {
	if s.Isolation == IsolationUnenforced {
		return "bridge"
	}
	return "none"
}

// start starts a sandbox on the backend's image with its Config (changed
// by mod) and closes it at cleanup.
func (s *suite) start(t *testing.T, opts sandboxagent.SandboxOptions, mod ...func(*sandboxagent.Config)) *sandboxagent.Sandbox {
	t.Helper()
	if opts.Image == "" {
		opts.Image = s.Image
	}
	opts.Config = s.Config
	if opts.Egress == "" && s.Isolation == IsolationUnenforced {
		opts.Egress = sandboxagent.EgressOpen
	}
	for _, m := range mod {
		m(&opts.Config)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := sandboxagent.NewSandbox(ctx, s.Runtime, opts)
	if err != nil {
		if errors.Is(err, sandboxagent.ErrImageNotFound) {
			t.Fatalf("NewSandbox: %v (the caller must provide image %s)", err, opts.Image)
		}
		t.Fatalf("NewSandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sb
}

// ctxT is a context for one subtest, cancelled at its end.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sh runs a script (with args as $1...) and fails the test unless it
// exits 0; it returns the stdout.
func sh(t *testing.T, ctx context.Context, sb *sandboxagent.Sandbox, script string, args ...string) string {
	t.Helper()
	res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: append([]string{"sh", "-c", script, "sh"}, args...)})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("in sandbox: %q: %v (exit %d, stderr %q)", script, err, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// markVar marks every process of one command of a test (inherited by its
// descendants), so a second exec can look for survivors.
const markVar = "RUNTIMETEST_MARK"

// markedScript prints "pid comm" of every process carrying
// RUNTIMETEST_MARK=$1 (it does not carry it itself). One grep reads all
// of /proc/*/environ, as the library's kill script does.
const markedScript = `for f in $(grep -lzxF -e "RUNTIMETEST_MARK=$1" /proc/[0-9]*/environ 2>/dev/null); do
	p=${f#/proc/}; p=${p%/environ}; c=; read -r c < "/proc/$p/comm" 2>/dev/null && echo "$p $c"
done; true`

// marked lists the live processes carrying mark.
func marked(t *testing.T, ctx context.Context, sb *sandboxagent.Sandbox, mark string) []string {
	t.Helper()
	out := strings.TrimSpace(sh(t, ctx, sb, markedScript, mark))
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// liveBuffer is a streaming writer a test can wait on.
type liveBuffer struct {
	mu      sync.Mutex
	buf     strings.Builder
	changed chan struct{}
}

func newLiveBuffer() *liveBuffer { return &liveBuffer{changed: make(chan struct{}, 1)} }

func (l *liveBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *liveBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until the buffer holds want, the command is finished or
// within passes; it reports whether want arrived.
func (l *liveBuffer) waitFor(want string, finished <-chan struct{}, within time.Duration) bool {
	deadline := time.After(within)
	for {
		if strings.Contains(l.String(), want) {
			return true
		}
		select {
		case <-l.changed:
		case <-finished:
			return strings.Contains(l.String(), want)
		case <-deadline:
			return false
		}
	}
}

// poll calls ok every 250 ms until it reports true or within passes, and
// returns its last answer: a bounded wait for a state change.
func poll(within time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}
