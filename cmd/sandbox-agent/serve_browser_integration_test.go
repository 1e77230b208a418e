//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// browserCommand is the agent's one tool call: slow enough that the test
// sees it on the page while the turn still runs, and with markup in it
// that the page must show as text.
const browserCommand = `sleep 4; echo browser-ok '<img src=x id=xss>'`

// The inspector in a real browser: serve in-process, one pi agent on its
// fake model, Chromium logs in through the form, selects the agent and
// starts a turn from the page; the tool call must show in the live pane
// while the turn runs, and the turn must end with the scripted reply. The
// screenshot lands in $SANDBOX_AGENT_ARTIFACTS (default .ci/out).
func TestInspectorBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	testenv.Runtime(t)
	srv := startServeWith(t, nil)

	// Unauthenticated: the login form, with 401.
	resp, err := http.Get(srv.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(page, []byte(`name="token"`)) {
		t.Fatalf("GET / without a token: %s, want 401 and the login form:\n%s", resp.Status, page)
	}

	id := srv.create(t, map[string]any{
		"driver": agentDriver,
		"fake_model_script": map[string]any{"responses": []map[string]string{
			{"tool": "shell", "command": browserCommand},
			{"text": "DONE"},
		}},
	})

	// The browser: started once with no deadline (a deadline on the first
	// Do would end the browser), every step after it bounded.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.WindowSize(1400, 1000))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(bctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v", chromium, err)
		}
	case <-time.After(time.Minute):
		cancelBrowser()
		t.Fatalf("%s did not start within a minute", chromium)
	}

	// The page's console, reported when the test ends (the goroutine must
	// not touch t: it may outlive the test by a moment).
	var consoleMu sync.Mutex
	var consoleLines, exceptions []string
	messages := chromedp.Console(bctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			consoleMu.Lock()
			consoleLines = append(consoleLines, m.String())
			if m.IsException() {
				exceptions = append(exceptions, m.String())
			}
			consoleMu.Unlock()
		}
	}()
	defer func() {
		consoleMu.Lock()
		defer consoleMu.Unlock()
		for _, l := range consoleLines {
			t.Logf("console: %s", l)
		}
		for _, e := range exceptions {
			t.Errorf("page exception: %s", e)
		}
	}()

	// The screenshot, on success and on failure alike (deferred calls run
	// before the cleanups stop serve).
	shot := artifactPath(t, "inspector.png")
	defer func() {
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Errorf("screenshot: %v", err)
			return
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Errorf("screenshot: %v", err)
			return
		}
		t.Logf("screenshot: %s", shot)
	}()

	do := func(what string, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, d)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	state := func() (pageState, error) {
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		return chromedp.Run(ctx, chromedp.Evaluate[pageState](pageStateJS))
	}
	// waitFor polls the page until ok says its state is what we wait for.
	waitFor := func(what string, d time.Duration, ok func(pageState) bool) pageState {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			st, err := state()
			if err == nil && ok(st) {
				return st
			}
			if time.Now().After(deadline) {
				dumpGoroutines(t)
				t.Fatalf("%s: not within %v (last page state %+v, err %v)\nserve stderr:\n%s", what, d, st, err, srv.stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	agentSel := chromedp.CSS(fmt.Sprintf(".agent[data-id=%q]", id))
	token := chromedp.CSS(`input[name="token"]`)
	do("open the login page", 30*time.Second, chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible(token))
	do("log in", 30*time.Second, chromedp.SendKeys(token, srv.token), chromedp.Submit(token), chromedp.WaitVisible(agentSel))
	do("select the agent", 30*time.Second, chromedp.Click(agentSel), chromedp.WaitVisible(chromedp.ID("turn-prompt")))
	waitFor("the live stream connected", 15*time.Second, func(s pageState) bool { return s.Live == "connected" })

	do("start a turn from the form", 30*time.Second,
		chromedp.SendKeys(chromedp.ID("turn-prompt"), "Run the command, then answer DONE."),
		chromedp.Click(chromedp.ID("turn-send")))

	// The tool call while the turn runs: no turn end on the page yet, and
	// the agent busy for the API.
	seen := waitFor("the tool_call row in #live", 2*time.Minute, func(s pageState) bool { return s.ToolCall != "" })
	if status := srv.agentStatus(t, id); status != "busy" || seen.Ended != 0 {
		t.Errorf("when the tool_call showed: agent status %q (want busy), %d turn ends on the page (want 0)", status, seen.Ended)
	}
	if !strings.Contains(seen.ToolCall, browserCommand) {
		t.Errorf("tool_call row %q does not show the command %q", seen.ToolCall, browserCommand)
	}
	t.Logf("tool_call on the page while the turn ran (tool_result shown yet: %v, running turn %q): %q", seen.ToolResult != "", seen.Running, seen.ToolCall)

	end := waitFor("the turn end in #live", 3*time.Minute, func(s pageState) bool { return s.Ended > 0 })
	if !strings.Contains(end.TurnEnd, "DONE") || !strings.Contains(end.Done, "DONE") {
		t.Errorf("turn end %q and done row %q, want the reply DONE", end.TurnEnd, end.Done)
	}
	if end.XSS {
		t.Errorf("markup from the sandbox became an element on the page")
	}
	if !strings.Contains(end.ToolResult, "browser-ok <img src=x id=xss>") {
		t.Errorf("tool_result row %q does not show the output as text", end.ToolResult)
	}
	waitFor("the form's request answered", 30*time.Second, func(s pageState) bool { return strings.Contains(s.Status, "DONE") })

	// What the page shows agrees with the API's turn.
	turn := srv.turn(t, id, 1)
	if turn.Reply != "DONE" || turn.Running {
		t.Errorf("turn 1 over the API: reply %q running %v", turn.Reply, turn.Running)
	}
	for _, e := range turn.Events {
		if e.Kind == sandboxagent.KindToolResult && e.Payload.ExitCode != nil && !strings.Contains(end.ExitCodes, fmt.Sprintf("[%d]", *e.Payload.ExitCode)) {
			t.Errorf("tool_result exit code %d is not on the page (exit codes shown: %q)", *e.Payload.ExitCode, end.ExitCodes)
		}
	}

	waitFor("the agent idle in the list", 15*time.Second, func(s pageState) bool { return s.AgentStatus == "idle" })
	// The lists re-render as they refresh: chromedp's Click (find the
	// node, then click it) can be handed a node already replaced ("Could
	// not find node with given id"). Click what the selector matches at
	// that moment instead.
	clickNow := func(sel string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel)
			ok, err := chromedp.Evaluate[bool](js)(ctx, tg)
			if err == nil && !ok {
				err = fmt.Errorf("nothing on the page matches %s", sel)
			}
			return chromedp.Void{}, err
		}
	}
	turn1, session := `#turns .turn[data-turn="1"]`, `#sessions .session`
	do("open turn 1", 30*time.Second, chromedp.WaitVisible(chromedp.CSS(turn1)), clickNow(turn1))
	waitFor("turn 1's events", 15*time.Second, func(s pageState) bool { return s.TurnDetail > 0 })
	do("open the session", 30*time.Second, chromedp.WaitVisible(chromedp.CSS(session)), clickNow(session))
	waitFor("the session's events from the audit trail", 15*time.Second, func(s pageState) bool { return s.SessionEvents > 0 })
}

// pageState is what the test reads off the page (pageStateJS).
type pageState struct {
	Live          string `json:"live"`     // #live-state: connecting, connected, reconnecting
	Running       string `json:"running"`  // #live's data-running: the running turn
	ToolCall      string `json:"toolCall"` // text of the tool_call row with browser-ok
	ToolResult    string `json:"toolResult"`
	ExitCodes     string `json:"exitCodes"` // "[0]" per exit code shown
	Done          string `json:"done"`
	Ended         int    `json:"ended"` // .turn-end blocks in #live
	TurnEnd       string `json:"turnEnd"`
	Status        string `json:"status"` // #turn-status
	AgentStatus   string `json:"agentStatus"`
	TurnDetail    int    `json:"turnDetail"`
	SessionEvents int    `json:"sessionEvents"`
	XSS           bool   `json:"xss"`
}

const pageStateJS = `(() => {
  const q = (s) => document.querySelector(s);
  const all = (s) => Array.from(document.querySelectorAll(s));
  const text = (s) => { const e = q(s); return e ? e.textContent : ""; };
  const call = all('#live .event[data-kind="tool_call"]').find((e) => e.textContent.includes("browser-ok"));
  const result = all('#live .event[data-kind="tool_result"]').find((e) => e.textContent.includes("browser-ok"));
  const agent = q("#agents .agent.selected .status");
  return {
    live: text("#live-state"),
    running: (q("#live") && q("#live").getAttribute("data-running")) || "",
    toolCall: call ? call.textContent : "",
    toolResult: result ? result.textContent : "",
    exitCodes: all('#live .event[data-kind="tool_result"] .exit-code').map((e) => "[" + e.getAttribute("data-exit") + "]").join(""),
    done: text('#live .event[data-kind="done"]'),
    ended: all("#live .turn-end").length,
    turnEnd: text("#live .turn-end"),
    status: text("#turn-status"),
    agentStatus: agent ? agent.textContent : "",
    turnDetail: all('#turn-detail .event[data-kind="tool_call"]').length,
    sessionEvents: all("#session-events .event").length,
    xss: document.getElementById("xss") !== null,
  };
})()`

// chromiumPath finds a headless Chromium: $SANDBOX_AGENT_CHROMIUM, else
// Debian's chromium-headless-shell (.ci/setup installs it), else a full
// Chromium or Chrome.
func chromiumPath(t *testing.T) string {
	t.Helper()
	names := []string{"chromium-headless-shell", "/usr/lib/chromium/chromium-headless-shell", "chromium", "google-chrome"}
	if p := os.Getenv("SANDBOX_AGENT_CHROMIUM"); p != "" {
		names = []string{p}
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	prereq.Missing(t, "no headless Chromium among %q (apt-get install chromium-headless-shell; .ci/setup installs it)", names)
	return ""
}

// artifactPath is where a test keeps a file for people to look at:
// $SANDBOX_AGENT_ARTIFACTS, else the repository's .ci/out.
func artifactPath(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("SANDBOX_AGENT_ARTIFACTS")
	if dir == "" {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".ci", "out")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// dumpGoroutines saves the stacks of this process (serve runs in it) next
// to the screenshot: a page that waits in vain mostly means a stuck server.
func dumpGoroutines(t *testing.T) {
	t.Helper()
	p := artifactPath(t, "inspector-goroutines.txt")
	f, err := os.Create(p)
	if err != nil {
		t.Errorf("goroutine dump: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		t.Errorf("goroutine dump: %v", err)
		return
	}
	t.Logf("goroutines: %s", p)
}

// agentStatus is agent id's status over the API.
func (s *serveProc) agentStatus(t *testing.T, id string) string {
	t.Helper()
	resp, out := s.do(t, http.MethodGet, "/v1/agents/"+id, nil)
	var a struct{ Status string }
	if err := json.Unmarshal(out, &a); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET agent %s: %d %s (%v)", id, resp.StatusCode, out, err)
	}
	return a.Status
}

// apiTurn is the part of a turn result the test reads.
type apiTurn struct {
	Turn    int                  `json:"turn"`
	Reply   string               `json:"reply"`
	Running bool                 `json:"running"`
	Events  []sandboxagent.Event `json:"events"`
}

func (s *serveProc) turn(t *testing.T, id string, n int) apiTurn {
	t.Helper()
	resp, out := s.do(t, http.MethodGet, fmt.Sprintf("/v1/agents/%s/turns/%d", id, n), nil)
	var r apiTurn
	if err := json.Unmarshal(out, &r); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET turn %d of %s: %d %s (%v)", n, id, resp.StatusCode, out, err)
	}
	return r
}
