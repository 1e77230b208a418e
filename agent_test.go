package sandboxagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/audit"
)

// fakeDriver speaks a toy JSON-lines protocol:
// {"session":"s1"} {"text":"hi"} {"fail":"msg"}.
type fakeDriver struct {
	key   string
	turns []Turn
}

func (d *fakeDriver) Name() string      { return "claude" } // any name versions.json knows
func (d *fakeDriver) Image() string     { return "" }
func (d *fakeDriver) Traits() Traits    { return Traits{Continue: true} }
func (d *fakeDriver) Secrets() []string { return []string{d.key} }
func (d *fakeDriver) Setup(ctx context.Context, c ContainerOps) error {
	return c.WriteFile(ctx, "/home/agent/.config/fake.json", []byte(`{}`), 0o600)
}
func (d *fakeDriver) Command(t Turn) (Invocation, error) {
	d.turns = append(d.turns, t)
	return Invocation{Cmd: []string{"fakecli", t.Prompt}, Env: map[string]string{"KEY": d.key}}, nil
}
func (d *fakeDriver) NewParser(Turn) Parser { return &fakeParser{} }

type fakeParser struct {
	reply, session, fail string
}

func (p *fakeParser) Parse(line []byte) []Event {
	var m map[string]string
	if err := json.Unmarshal(line, &m); err != nil {
		return []Event{{Kind: KindRaw, Payload: Payload{Raw: string(line)}}}
	}
	switch {
	case m["session"] != "":
		p.session = m["session"]
		return []Event{{Kind: KindSession, SessionID: m["session"]}}
	case m["text"] != "":
		p.reply = m["text"]
		return []Event{{Kind: KindText, Payload: Payload{Text: m["text"]}}}
	case m["fail"] != "":
		p.fail = m["fail"]
		return []Event{{Kind: KindError, Payload: Payload{Text: m["fail"], IsError: true}}}
	}
	return nil
}

func (p *fakeParser) Finish(code int, stderr []byte) (TurnOutcome, error) {
	if p.fail != "" || code != 0 {
		return TurnOutcome{SessionID: p.session}, &DriverError{Message: p.fail, ExitCode: code, Status: 401}
	}
	return TurnOutcome{Reply: p.reply, SessionID: p.session}, nil
}

// cliRuntime is a fakeRuntime whose "CLI" prints scripted stdout.
func cliRuntime(out func(prompt string) (stdout, stderr string, code int)) *fakeRuntime {
	f := &fakeRuntime{}
	f.exec = func(ctx context.Context, req RuntimeExec) (int, error) {
		if req.Cmd[0] == "sh" && strings.Contains(req.Cmd[2], "id -u") {
			io.WriteString(req.Stdout, "1000\n1000\n")
			return 0, nil
		}
		if req.Cmd[0] != "fakecli" {
			return 0, nil // kill script and the like
		}
		stdout, stderr, code := out(req.Cmd[1])
		if code == -1 { // hang until killed
			<-ctx.Done()
			return -1, ctx.Err()
		}
		io.WriteString(req.Stdout, stdout)
		io.WriteString(req.Stderr, stderr)
		return code, nil
	}
	return f
}

func startFake(t *testing.T, rt Runtime, drv Driver, mod func(*Config)) (*Agent, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	cfg.Egress = EgressOpen // fakeDriver is not a ModelRouter (network_test.go routes one)
	if mod != nil {
		mod(&cfg)
	}
	a, err := Start(context.Background(), rt, drv, WithConfig(cfg), WithModel("m1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, cfg.AuditRoot
}

func TestAgentTurnsEventsAndAudit(t *testing.T) {
	const key = "sk-secret-0123456789"
	rt := cliRuntime(func(prompt string) (string, string, int) {
		return `{"session":"s1"}` + "\n" + `not json ` + key + "\n" + `{"text":"reply to ` + prompt + `"}` + "\n", "", 0
	})
	drv := &fakeDriver{key: key}
	a, root := startFake(t, rt, drv, nil)

	var streamed []Event
	res, err := a.Stream(context.Background(), "one", func(e Event) { streamed = append(streamed, e) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Reply != "reply to one" || res.SessionID != "s1" || a.SessionID() != "s1" {
		t.Fatalf("res %+v", res)
	}
	kinds := []string{}
	for _, e := range res.Events {
		kinds = append(kinds, string(e.Kind)+":"+itoa(e.Line))
		if e.Turn != 1 || e.SessionID != "s1" || e.Time.IsZero() {
			t.Errorf("event not completed: %+v", e)
		}
	}
	if got := strings.Join(kinds, " "); got != "session:1 raw:2 text:3 done:0" {
		t.Errorf("events %s", got)
	}
	if len(streamed) != len(res.Events) {
		t.Errorf("streamed %d of %d", len(streamed), len(res.Events))
	}
	reply, err := a.Ask(context.Background(), "two")
	if err != nil || reply != "reply to two" {
		t.Fatalf("turn 2: %q %v", reply, err)
	}
	if len(drv.turns) != 2 || drv.turns[0].SessionID != "" || drv.turns[1].SessionID != "s1" || drv.turns[1].Model != "m1" {
		t.Errorf("turns %+v", drv.turns)
	}

	dir := res.AuditDir
	if filepath.Dir(filepath.Dir(dir)) != root || filepath.Base(dir) != "s1" {
		t.Fatalf("audit dir %s", dir)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "session.jsonl"))
	if strings.Count(string(raw), "\n") != 6 || strings.Contains(string(raw), key) || !strings.Contains(string(raw), "not json [REDACTED]") {
		t.Errorf("session.jsonl %q", raw)
	}
	evs, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	var lines []int
	for _, l := range strings.Split(strings.TrimSpace(string(evs)), "\n") {
		var e Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, e.Line)
	}
	if got := jsonInts(lines); got != "[1,2,3,0,4,5,6,0]" {
		t.Errorf("event lines %s", got)
	}
	var st audit.Status
	b, _ := os.ReadFile(filepath.Join(dir, "status.json"))
	if err := json.Unmarshal(b, &st); err != nil || len(st.Turns) != 2 || st.Turns[1].FirstLine != 4 || st.Turns[1].LastLine != 6 || st.Driver != "claude" {
		t.Errorf("status %s (%v)", b, err)
	}
	if strings.Contains(string(evs)+string(b), key) {
		t.Error("key in audit")
	}
}

func jsonInts(v []int) string { b, _ := json.Marshal(v); return string(b) }

func TestAgentErrors(t *testing.T) {
	tests := []struct {
		name  string
		out   func(string) (string, string, int)
		check func(t *testing.T, err error)
	}{
		{"driver error", func(string) (string, string, int) {
			return `{"session":"s"}` + "\n" + `{"fail":"bad key sk-secret-0123456789"}` + "\n", "boom sk-secret-0123456789", 1
		}, func(t *testing.T, err error) {
			var de *DriverError
			if !errors.As(err, &de) || de.Status != 401 || de.Driver != "claude" || strings.Contains(de.Error()+de.Stderr, "sk-secret") || de.Stderr != "boom [REDACTED]" {
				t.Errorf("err %#v", err)
			}
		}},
		{"cli missing", func(string) (string, string, int) { return "", "fakecli: not found", 127 }, func(t *testing.T, err error) {
			if !errors.Is(err, ErrCLIMissing) {
				t.Errorf("err %v", err)
			}
		}},
		{"no output", func(string) (string, string, int) { return "", "", 0 }, func(t *testing.T, err error) {
			var de *DriverError
			if !errors.As(err, &de) || !strings.Contains(de.Message, "printed nothing") {
				t.Errorf("err %v", err)
			}
			if !errors.Is(err, ErrNoOutput) {
				t.Errorf("errors.Is(%v, ErrNoOutput) = false", err)
			}
		}},
		{"timeout", func(string) (string, string, int) { return "", "", -1 }, func(t *testing.T, err error) {
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("err %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := startFake(t, cliRuntime(tt.out), &fakeDriver{key: "sk-secret-0123456789"}, func(c *Config) { c.Timeouts.Ask = 100 * time.Millisecond })
			res, err := a.Stream(context.Background(), "p", nil)
			tt.check(t, err)
			last := res.Events[len(res.Events)-1]
			if last.Kind != KindDone || !last.Payload.IsError {
				t.Errorf("last event %+v", last)
			}
		})
	}
}

func TestAgentAuditOffAndFailing(t *testing.T) {
	out := func(string) (string, string, int) { return `{"session":"s1"}` + "\n" + `{"text":"ok"}` + "\n", "", 0 }
	a, root := startFake(t, cliRuntime(out), &fakeDriver{key: "k-12345"}, func(c *Config) { c.AuditEnabled = false })
	res, err := a.Stream(context.Background(), "p", nil)
	if err != nil || res.AuditDir != "" {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("audit written while off: %v", err)
	}
	// An unwritable root is a warning, not a failed turn.
	blocker := filepath.Join(t.TempDir(), "file")
	os.WriteFile(blocker, nil, 0o600)
	a, _ = startFake(t, cliRuntime(out), &fakeDriver{key: "k-12345"}, func(c *Config) { c.AuditRoot = filepath.Join(blocker, "sub") })
	if reply, err := a.Ask(context.Background(), "p"); err != nil || reply != "ok" {
		t.Fatalf("turn failed on audit error: %q %v", reply, err)
	}
}

// A CLI that dies mid-stream (half a JSON line, then a crash) fails the
// turn with a DriverError that keeps its stderr; what it printed is kept.
func TestAgentCLICrashMidStream(t *testing.T) {
	out := func(string) (string, string, int) {
		return `{"session":"s9"}` + "\n" + `{"text":"partial` /* no newline: cut off */, "Segmentation fault (core dumped)", 139
	}
	a, _ := startFake(t, cliRuntime(out), &fakeDriver{key: "k-123456"}, nil)
	res, err := a.Stream(context.Background(), "p", nil)
	var de *DriverError
	if !errors.As(err, &de) || de.ExitCode != 139 || !strings.Contains(de.Stderr, "Segmentation fault") {
		t.Fatalf("err %#v", err)
	}
	var raw bool
	for _, e := range res.Events {
		if e.Kind == KindRaw && e.Payload.Raw == `{"text":"partial` && e.Line == 2 {
			raw = true
		}
	}
	if !raw || res.SessionID != "s9" {
		t.Errorf("the cut-off line was not kept as a raw event: %+v", res.Events)
	}
	b, _ := os.ReadFile(filepath.Join(res.AuditDir, "session.jsonl"))
	if !strings.HasSuffix(string(b), `{"text":"partial`+"\n") {
		t.Errorf("session.jsonl %q", b)
	}
}

// An enormous line is cut at maxLineBytes (memory stays bounded), flagged,
// and the lines after it are still parsed.
func TestAgentEnormousLine(t *testing.T) {
	huge := strings.Repeat("x", maxLineBytes+3<<20)
	out := func(string) (string, string, int) {
		return `{"session":"s8"}` + "\n" + huge + "\n" + `{"text":"after"}` + "\n", "", 0
	}
	a, _ := startFake(t, cliRuntime(out), &fakeDriver{key: "k-123456"}, nil)
	res, err := a.Stream(context.Background(), "p", nil)
	if err != nil || res.Reply != "after" {
		t.Fatalf("%q %v", res.Reply, err)
	}
	var cutFlag bool
	for _, e := range res.Events {
		if e.Kind == KindRaw && len(e.Payload.Raw) > maxLineBytes {
			t.Fatalf("raw event of %d bytes", len(e.Payload.Raw))
		}
		if e.Kind == KindRaw && e.Line == 2 && strings.Contains(e.Payload.Text, "was cut") {
			cutFlag = true
		}
	}
	if !cutFlag {
		t.Error("the cut was not reported")
	}
	fi, err := os.Stat(filepath.Join(res.AuditDir, "session.jsonl"))
	if err != nil || fi.Size() > maxLineBytes+1<<10 {
		t.Errorf("session.jsonl size %v (%v)", fi.Size(), err)
	}
}

// Start refuses an unpinned image before it touches the engine; the error
// of images/catalog reaches the caller as ErrInvalidArgument, its message
// unchanged.
func TestStartRefusesUnpinnedImage(t *testing.T) {
	_, err := Start(context.Background(), nil, &fakeDriver{}, WithImage("mine/claude:latest"))
	if !errors.Is(err, ErrInvalidArgument) || !strings.HasPrefix(err.Error(), `invalid argument: image "mine/claude:latest" is not pinned`) {
		t.Errorf("Start = %v, want ErrInvalidArgument", err)
	}
}

// TestAgentSandboxOptions: WithEnv and WithResources reach the container;
// WithSandbox calls apply in order; bad values are refused before the
// engine is asked.
func TestAgentSandboxOptions(t *testing.T) {
	rt := cliRuntime(func(string) (string, string, int) { return "", "", 0 })
	cfg := DefaultConfig()
	cfg.AuditEnabled = false
	cfg.Egress = EgressOpen
	var order []string
	a, err := Start(context.Background(), rt, &fakeDriver{key: "k-123456"}, WithConfig(cfg),
		WithEnv(map[string]string{"A": "1"}), WithEnv(map[string]string{"B": "2"}), WithResources(64<<20, 77),
		WithSandbox(func(*SandboxOptions) { order = append(order, "first") }),
		WithSandbox(func(*SandboxOptions) { order = append(order, "second") }))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	spec := rt.created[0]
	if spec.MemoryBytes != 64<<20 || spec.PidsLimit != 77 || !slices.Contains(spec.Env, "A=1") || !slices.Contains(spec.Env, "B=2") {
		t.Errorf("spec: memory %d, pids %d, env %v", spec.MemoryBytes, spec.PidsLimit, spec.Env)
	}
	if strings.Join(order, ",") != "first,second" {
		t.Errorf("WithSandbox order: %v", order)
	}
	for name, opt := range map[string]AgentOption{
		"env key with =": WithEnv(map[string]string{"A=B": "x"}),
		"empty env key":  WithEnv(map[string]string{"": "x"}),
		"tiny memory":    WithResources(1<<20, 0),
		"negative pids":  WithResources(0, -1),
	} {
		if _, err := Start(context.Background(), nil, &fakeDriver{}, opt); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestAgentTurnRecordsAndHold: the agent numbers and keeps its turns, an
// observer sees start, events and end in order, and Hold keeps turns and
// session calls out until released.
func TestAgentTurnRecordsAndHold(t *testing.T) {
	rt := cliRuntime(func(prompt string) (string, string, int) {
		if prompt == "fail" {
			return `{"session":"s1"}` + "\n", "", 3
		}
		return `{"session":"s1"}` + "\n" + `{"text":"re ` + prompt + `"}` + "\n", "", 0
	})
	a, _ := startFake(t, rt, &fakeDriver{key: "k-123456"}, nil)
	var seen []string
	running, stop := a.Observe(func(rec TurnRecord, ev *Event) {
		switch {
		case ev != nil:
			seen = append(seen, fmt.Sprintf("%d:%s", rec.Turn, ev.Kind))
		case rec.Running:
			seen = append(seen, fmt.Sprintf("%d:start:%s", rec.Turn, rec.Prompt))
		default:
			seen = append(seen, fmt.Sprintf("%d:end:%s:%d", rec.Turn, rec.Reply, rec.EventCount))
		}
	})
	if running.Turn != 0 {
		t.Errorf("running before any turn: %+v", running)
	}
	if _, err := a.Ask(context.Background(), "one"); err != nil {
		t.Fatal(err)
	}
	_, ferr := a.Ask(context.Background(), "fail")
	stop()
	if _, err := a.Ask(context.Background(), "three"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, " "); !strings.HasPrefix(got, "1:start:one 1:session 1:text 1:done 1:end:re one:3 2:start:fail") || strings.Contains(got, "3:") {
		t.Errorf("observed %s", got)
	}
	turns := a.Turns()
	if len(turns) != 3 || turns[0].Turn != 1 || turns[2].Turn != 3 || turns[1].Err == nil || !errors.Is(turns[1].Err, ferr) ||
		turns[0].Running || turns[0].Reply != "re one" || turns[0].SessionID != "s1" || len(turns[0].Events) != 3 || turns[2].Prompt != "three" {
		t.Fatalf("turns %+v", turns)
	}

	ctx, release, err := a.Hold(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ListSessions(ctx); !errors.Is(err, ErrUnsupported) { // runs under the hold
		t.Errorf("ListSessions under the hold: %v", err)
	}
	if _, _, err := a.Hold(context.Background(), 50*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Errorf("a second Hold: %v, want ErrTimeout", err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.Stream(wctx, "four", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stream during a hold: %v, want its context's error", err)
	}
	release()
	release()
	if _, err := a.Ask(context.Background(), "five"); err != nil {
		t.Errorf("after release: %v", err)
	}
}
