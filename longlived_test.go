package sandboxagent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// llDriver is fakeDriver with a long-lived mode: "fakeserver" reads one
// prompt per line and answers each with a text line and an end line.
type llDriver struct {
	fakeDriver
	abort string // AbortInput ("" = none: the process is killed)
}

func (d *llDriver) ServeCommand(t Turn) (Invocation, error) {
	return Invocation{Cmd: []string{"fakeserver", t.SessionID}}, nil
}
func (d *llDriver) TurnInput(t Turn) ([]byte, error) { return []byte(t.Prompt + "\n"), nil }
func (d *llDriver) AbortInput() []byte {
	if d.abort == "" {
		return nil
	}
	return []byte(d.abort + "\n")
}
func (d *llDriver) NewParser(Turn) Parser { return &llParser{} }

type llParser struct {
	fakeParser
	ended bool
}

func (p *llParser) Parse(line []byte) []Event {
	var m map[string]string
	if json.Unmarshal(line, &m) == nil && m["end"] != "" {
		p.ended = true
		return nil
	}
	return p.fakeParser.Parse(line)
}
func (p *llParser) Ended() (bool, time.Duration) { return p.ended, 0 }

// llRuntime runs fakeserver: "hang" answers nothing (until "abort"),
// "crash" exits 3, anything else gets "reply to PROMPT".
func llRuntime(t *testing.T) (*fakeRuntime, func() int) {
	var mu sync.Mutex
	servers := 0
	f := &fakeRuntime{}
	f.exec = func(ctx context.Context, req RuntimeExec) (int, error) {
		if req.Cmd[0] == "sh" && strings.Contains(req.Cmd[2], "id -u") {
			io.WriteString(req.Stdout, "1000\n1000\n")
			return 0, nil
		}
		if req.Cmd[0] != "fakeserver" {
			return 0, nil
		}
		mu.Lock()
		servers++
		n := servers
		mu.Unlock()
		session := "s1"
		if req.Cmd[1] != "" {
			session = req.Cmd[1]
		}
		sc := bufio.NewScanner(req.Stdin)
		for sc.Scan() {
			mu.Lock()
			f.lines = append(f.lines, sc.Text())
			mu.Unlock()
			switch p := sc.Text(); p {
			case "warmready": // a CLI's own lines, then its answer
				io.WriteString(req.Stdout, `{"noise":"1"}`+"\n"+`{"ready":"1"}`+"\n")
			case "warmturn":
				io.WriteString(req.Stdout, `{"warmed":"1"}`+"\n")
			case "warmcrash":
				io.WriteString(req.Stderr, "cannot start\n")
				return 5, nil
			case "hang":
			case "abort":
				io.WriteString(req.Stdout, `{"text":"aborted"}`+"\n"+`{"end":"1"}`+"\n")
			case "silentcrash": // dies before it prints anything
				return 4, nil
			case "staleonce": // the first server had died meanwhile
				if n == 1 {
					return 4, nil
				}
				io.WriteString(req.Stdout, `{"session":"`+session+`"}`+"\n"+`{"text":"reply to `+p+` from server `+itoa(n)+`"}`+"\n"+`{"end":"1"}`+"\n")
			case "replyexit": // ends the turn, then exits
				io.WriteString(req.Stdout, `{"session":"`+session+`"}`+"\n"+`{"text":"bye"}`+"\n"+`{"end":"1"}`+"\n")
				return 0, nil
			case "crash":
				io.WriteString(req.Stdout, `{"text":"dying"}`+"\n")
				io.WriteString(req.Stderr, "boom\n")
				return 3, nil
			default:
				io.WriteString(req.Stdout, `{"session":"`+session+`"}`+"\n"+`{"text":"reply to `+p+` from server `+itoa(n)+`"}`+"\n"+`{"end":"1"}`+"\n")
			}
		}
		return 0, nil
	}
	return f, func() int { mu.Lock(); defer mu.Unlock(); return servers }
}

func TestLongLivedTurnsShareOneProcess(t *testing.T) {
	rt, servers := llRuntime(t)
	a, _ := startFake(t, rt, &llDriver{fakeDriver: fakeDriver{key: "k"}}, nil)
	ctx := context.Background()
	for i, p := range []string{"one", "two", "three"} {
		res, err := a.Stream(ctx, p, nil)
		if err != nil || res.Reply != "reply to "+p+" from server 1" || res.SessionID != "s1" {
			t.Fatalf("turn %d: %+v %v", i+1, res, err)
		}
		if last := res.Events[len(res.Events)-1]; last.Kind != KindDone {
			t.Errorf("turn %d ends with %+v", i+1, last)
		}
	}
	if n := servers(); n != 1 {
		t.Errorf("%d server processes for three turns, want 1", n)
	}
	// Another session: another process, started on that session.
	a.SetSession("s9")
	if res, err := a.Stream(ctx, "four", nil); err != nil || res.Reply != "reply to four from server 2" || res.SessionID != "s9" {
		t.Fatalf("after SetSession: %+v %v", res, err)
	}
}

func TestLongLivedCrashRestartsOnTheSession(t *testing.T) {
	rt, servers := llRuntime(t)
	a, _ := startFake(t, rt, &llDriver{fakeDriver: fakeDriver{key: "k"}}, nil)
	ctx := context.Background()
	if _, err := a.Ask(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	res, err := a.Stream(ctx, "crash", nil)
	if !errors.Is(err, ErrCLIExited) {
		t.Fatalf("crash: %v, want ErrCLIExited", err)
	}
	if !strings.Contains(err.Error(), "exit 3") || len(res.Events) < 2 || res.Events[0].Payload.Text != "dying" {
		t.Errorf("crash: %v, events %+v: want the exit code and what it printed", err, res.Events)
	}
	res, err = a.Stream(ctx, "two", nil)
	if err != nil || res.Reply != "reply to two from server 2" || res.SessionID != "s1" {
		t.Fatalf("after the crash: %+v %v", res, err)
	}
	var restart []string
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, x := range rt.execs {
		if x.Cmd[0] == "fakeserver" {
			restart = x.Cmd
		}
	}
	if restart[1] != "s1" || servers() != 2 {
		t.Errorf("%d server processes, the last as %v; want 2, restarted on session s1", servers(), restart)
	}
}

// A process kept from an earlier turn that dies before it prints a line
// of the next one (it had died meanwhile) is replaced and the turn runs
// on the new one, once; one that dies so on a fresh start is an error.
func TestLongLivedStaleProcessRetriedOnce(t *testing.T) {
	rt, servers := llRuntime(t)
	a, _ := startFake(t, rt, &llDriver{fakeDriver: fakeDriver{key: "k"}}, nil)
	ctx := context.Background()
	if _, err := a.Ask(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	res, err := a.Stream(ctx, "staleonce", nil)
	if err != nil || res.Reply != "reply to staleonce from server 2" || res.SessionID != "s1" {
		t.Fatalf("stale process: %+v %v", res, err)
	}
	if _, err := a.Stream(ctx, "silentcrash", nil); !errors.Is(err, ErrCLIExited) {
		t.Fatalf("silent crash: %v, want ErrCLIExited", err)
	}
	if n := servers(); n != 3 {
		t.Errorf("%d server processes, want 3 (one retry of the silent crash, not more)", n)
	}
	if res, err := a.Stream(ctx, "two", nil); err != nil || res.Reply != "reply to two from server 4" {
		t.Fatalf("after: %+v %v", res, err)
	}
	// A process that ends its turn and then exits served the turn; the
	// next turn gets a new one.
	for i := range 10 { // the exit and the last line race
		if res, err := a.Stream(ctx, "replyexit", nil); err != nil || res.Reply != "bye" {
			t.Fatalf("replyexit %d: %+v %v", i, res, err)
		}
	}
}

func TestLongLivedAbort(t *testing.T) {
	for name, tc := range map[string]struct {
		abort       string
		wantServers int // after the abort and one more turn
	}{
		"protocol interrupt": {"abort", 1},
		"kill":               {"", 2},
	} {
		t.Run(name, func(t *testing.T) {
			rt, servers := llRuntime(t)
			a, _ := startFake(t, rt, &llDriver{fakeDriver: fakeDriver{key: "k"}, abort: tc.abort}, nil)
			if _, err := a.Ask(context.Background(), "one"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			res, err := a.Stream(ctx, "hang", nil)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("aborted turn: %v", err)
			}
			if last := res.Events[len(res.Events)-1]; last.Kind != KindDone {
				t.Errorf("aborted turn ends with %+v", last)
			}
			res, err = a.Stream(context.Background(), "two", nil)
			if err != nil || res.SessionID != "s1" {
				t.Fatalf("after the abort: %+v %v", res, err)
			}
			if n := servers(); n != tc.wantServers {
				t.Errorf("%d server processes, want %d", n, tc.wantServers)
			}
		})
	}
}

func TestLongLivedTimeoutKills(t *testing.T) {
	rt, servers := llRuntime(t)
	a, _ := startFake(t, rt, &llDriver{fakeDriver: fakeDriver{key: "k"}, abort: "abort"}, func(c *Config) { c.Timeouts.Ask = 200 * time.Millisecond })
	_, err := a.Stream(context.Background(), "hang", nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("hung turn: %v, want ErrTimeout", err)
	}
	if _, err := a.Ask(context.Background(), "two"); err != nil {
		t.Fatal(err)
	}
	if n := servers(); n != 2 {
		t.Errorf("%d server processes, want 2 (the hung one killed)", n)
	}
}

func TestPerTurnConfigBypassesLongLived(t *testing.T) {
	rt := cliRuntime(func(prompt string) (string, string, int) { return `{"text":"per turn ` + prompt + `"}` + "\n", "", 0 })
	a, _ := startFake(t, rt, &llDriver{fakeDriver: fakeDriver{key: "k"}}, func(c *Config) { c.PerTurn = true })
	if reply, err := a.Ask(context.Background(), "x"); err != nil || reply != "per turn x" {
		t.Fatalf("%q %v", reply, err)
	}
}

// warmDriver is llDriver with warm steps: a ready probe and a warm-up
// turn step.
type warmDriver struct {
	llDriver
	first string // the first step's input
}

func (d *warmDriver) WarmSteps(Turn) []WarmStep {
	is := func(k string) func([]byte) (bool, error) {
		return func(l []byte) (bool, error) {
			var m map[string]string
			return json.Unmarshal(l, &m) == nil && m[k] == "1", nil
		}
	}
	return []WarmStep{
		{Input: []byte(d.first + "\n"), Done: is("ready")},
		{Input: []byte("warmturn\n"), Done: is("warmed"), Turn: true},
	}
}

func TestWarm(t *testing.T) {
	rt, servers := llRuntime(t)
	a, _ := startFake(t, rt, &warmDriver{llDriver: llDriver{fakeDriver: fakeDriver{key: "k"}}, first: "warmready"}, nil)
	ctx := context.Background()
	if err := a.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Warm(ctx); err != nil { // already warm: nothing
		t.Fatal(err)
	}
	if n := servers(); n != 1 {
		t.Fatalf("%d processes after Warm twice, want 1", n)
	}
	// The CLI's lines before its answer are not the turn's.
	res, err := a.Stream(ctx, "one", nil)
	if err != nil || res.Reply != "reply to one from server 1" || res.SessionID != "s1" {
		t.Fatalf("turn after Warm: %+v %v", res, err)
	}
	if n := servers(); n != 1 {
		t.Errorf("%d processes, want the warmed one", n)
	}
	// No model proxy (fakeDriver is no ModelRouter): no warm-up turn, whose
	// model requests nothing could answer but the model.
	if got := rt.lines; !slices.Equal(got, []string{"warmready", "one"}) {
		t.Errorf("the CLI read %q, want the ready probe and the turn", got)
	}
}

// A session chosen after Warm gets a process of its own: the warmed one
// serves a new session only.
func TestWarmThenAnotherSession(t *testing.T) {
	rt, servers := llRuntime(t)
	a, _ := startFake(t, rt, &warmDriver{llDriver: llDriver{fakeDriver: fakeDriver{key: "k"}}, first: "warmready"}, nil)
	if err := a.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.SetSession("s9")
	if res, err := a.Stream(context.Background(), "one", nil); err != nil || res.Reply != "reply to one from server 2" || res.SessionID != "s9" {
		t.Fatalf("turn on s9 after Warm: %+v %v", res, err)
	}
	if n := servers(); n != 2 {
		t.Errorf("%d processes, want 2", n)
	}
}

// Files written after Warm (rules, skills, uploads) reach the CLI: the
// first turn starts it afresh.
func TestWarmThenWriteRestarts(t *testing.T) {
	rt, servers := llRuntime(t)
	a, _ := startFake(t, rt, &warmDriver{llDriver: llDriver{fakeDriver: fakeDriver{key: "k"}}, first: "warmready"}, nil)
	ctx := context.Background()
	if err := a.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Container().WriteFile(ctx, "/workspace/AGENTS.md", []byte("rules"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Stream(ctx, "one", nil); err != nil || res.Reply != "reply to one from server 2" {
		t.Fatalf("turn after a write: %+v %v", res, err)
	}
	// The next turns keep that process, writes or not.
	if err := a.Container().WriteFile(ctx, "/workspace/x", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Stream(ctx, "two", nil); err != nil || res.Reply != "reply to two from server 2" {
		t.Fatalf("second turn: %+v %v", res, err)
	}
	if n := servers(); n != 2 {
		t.Errorf("%d processes, want 2", n)
	}
}

func TestWarmFails(t *testing.T) {
	for _, tc := range []struct {
		first string
		want  error
	}{
		{"warmcrash", ErrCLIExited},
		{"hang", context.DeadlineExceeded}, // the caller's ctx; the start timeout works alike
	} {
		t.Run(tc.first, func(t *testing.T) {
			rt, servers := llRuntime(t)
			a, _ := startFake(t, rt, &warmDriver{llDriver: llDriver{fakeDriver: fakeDriver{key: "k"}}, first: tc.first}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := a.Warm(ctx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Warm: %v, want %v", err, tc.want)
			}
			if tc.first == "warmcrash" && !strings.Contains(err.Error(), "cannot start") {
				t.Errorf("Warm's error lacks the CLI's stderr: %v", err)
			}
			// The failed process is gone: the turn starts another.
			if res, err := a.Stream(context.Background(), "one", nil); err != nil || res.Reply != "reply to one from server 2" {
				t.Fatalf("turn after a failed Warm: %+v %v", res, err)
			}
			if n := servers(); n != 2 {
				t.Errorf("%d processes, want 2", n)
			}
		})
	}
}

func TestWarmPerTurnIsNoOp(t *testing.T) {
	rt, servers := llRuntime(t)
	a, _ := startFake(t, rt, &warmDriver{llDriver: llDriver{fakeDriver: fakeDriver{key: "k"}}, first: "warmready"}, func(c *Config) { c.PerTurn = true })
	if err := a.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := servers(); n != 0 {
		t.Errorf("per turn: Warm started %d processes", n)
	}
}

// The warm-up's fake model takes a bounded number of bounded requests:
// what a sandbox sends it is kept.
func TestLocalModelBounds(t *testing.T) {
	served := 0
	l := &localModel{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		served++
	})}
	post := func(body io.Reader, size int64) int {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", body)
		r.ContentLength = size
		w := httptest.NewRecorder()
		l.serve(w, r)
		return w.Code
	}
	if code := post(strings.NewReader("{}"), 2); code != 200 {
		t.Fatalf("a small request: %d", code)
	}
	big := strings.Repeat("x", maxLocalBody+1)
	if code := post(strings.NewReader(big), int64(len(big))); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a declared large body: %d, want 413", code)
	}
	if code := post(strings.NewReader(big), -1); code != http.StatusRequestEntityTooLarge {
		t.Errorf("an undeclared large body: %d, want 413", code)
	}
	for i := 3; i < maxLocalRequests; i++ {
		post(strings.NewReader("{}"), 2)
	}
	if code := post(strings.NewReader("{}"), 2); code != http.StatusTooManyRequests {
		t.Errorf("request %d: %d, want 429", maxLocalRequests+1, code)
	}
	if served != maxLocalRequests-2 {
		t.Errorf("served %d, want %d", served, maxLocalRequests-2)
	}
}

// modeDriver is llDriver recording the mode each turn's parser is made
// for (Turn.LongLived), which a driver printing another vocabulary in
// each mode picks its parser by.
type modeDriver struct {
	llDriver
	longLived []bool
}

func (d *modeDriver) NewParser(t Turn) Parser {
	d.longLived = append(d.longLived, t.LongLived)
	return d.llDriver.NewParser(t)
}

func TestTurnLongLivedNamesTheMode(t *testing.T) {
	for _, perTurn := range []bool{false, true} {
		var rt Runtime = cliRuntime(func(prompt string) (string, string, int) { return `{"text":"per turn ` + prompt + `"}` + "\n", "", 0 })
		if !perTurn {
			rt, _ = llRuntime(t)
		}
		d := &modeDriver{llDriver: llDriver{fakeDriver: fakeDriver{key: "k"}}}
		a, _ := startFake(t, rt, d, func(c *Config) { c.PerTurn = perTurn })
		for _, p := range []string{"one", "two"} {
			if _, err := a.Ask(context.Background(), p); err != nil {
				t.Fatalf("per_turn %v: %v", perTurn, err)
			}
		}
		if want := []bool{!perTurn, !perTurn}; !slices.Equal(d.longLived, want) {
			t.Errorf("per_turn %v: the parsers' Turn.LongLived %v, want %v", perTurn, d.longLived, want)
		}
		if perTurn && (len(d.turns) != 2 || slices.ContainsFunc(d.turns, func(t Turn) bool { return t.LongLived })) {
			t.Errorf("per_turn: Command's turns %+v, want two with LongLived false", d.turns)
		}
	}
}
