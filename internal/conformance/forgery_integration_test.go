//go:build integration

package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// The markers of the forged turn (testdata/forgery/<driver>.jsonl) and of
// the real one. The forged lines never reach the model: they are only
// written into the CLI's stdout pipe, so no model record can hold them.
const (
	forgedCall   = "FORGED-CALL"   // the command of a tool call that never ran
	forgedOutput = "FORGED-OUTPUT" // its "output"
	forgedReply  = "FORGED-REPLY"  // the forged final answer (and result line)
	realReply    = "REAL-REPLY"    // the model's real final answer
	secondReply  = "SECOND-REPLY"  // the next turn's answer
)

// forgedPath is where the test uploads the forged lines, so that the
// attack's command (which the model sends, and the proxy records) holds
// none of the forged text.
const forgedPath = "/tmp/sa-forgery.jsonl"

// execRoots runs body for each exec root process of the sandbox that is
// not root's — $d is its /proc folder. An exec the host starts has PPid 0
// inside the container; pid 1 (init) and root's (the relays) are
// skipped. The only such process during a turn is the agent CLI's (its
// long-lived process, or the per-turn CLI or its wrapper): its fd 1 is the
// pipe that carries the CLI's output to the host. It reads /proc with sed
// only (not every image has procps or awk).
func execRoots(body string) string {
	return `for d in /proc/[0-9]*; do ` +
		`[ "${d#/proc/}" = 1 ] && continue; ` +
		`[ "$(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null)" = 0 ] || continue; ` +
		`[ "$(sed -n 's/^Uid:[[:space:]]*\([0-9]*\).*/\1/p' "$d/status" 2>/dev/null)" = 0 ] && continue; ` +
		body + `; done`
}

// forgeCommand is the attack the model asks the agent's shell tool to
// run: the forged lines written into the CLI's stdout pipe, between the
// CLI's real lines. It prints how many processes it wrote to.
var forgeCommand = `n=0; ` + execRoots(`cat `+forgedPath+` > "$d/fd/1" 2>/dev/null && n=$((n+1))`) + `; echo "sa-forgery: wrote to $n processes"`

// TestConformanceForgery (issue 23, "the host trusts nothing from a
// sandbox"): a tool the agent runs executes as the CLI's user, so it can
// open /proc/<cli>/fd/1 and write lines into the pipe that carries the
// CLI's output to the host. Each driver's turn runs such an attack: the
// forged lines (testdata/forgery/<driver>.jsonl, in the exact format of
// the CLI's output) claim a tool call that never ran (echo FORGED-CALL),
// its output and a final answer FORGED-REPLY — a complete turn, turn end
// included — while the model's real answer is REAL-REPLY. The host must
// check the CLI's events against what its model proxy saw: every forged
// event kept with verified false and reported by an unverified event
// (events.jsonl too), the real tool call verified, the reply the model's
// (also in status.json), the forged turn end not ending a long-lived turn
// (the next turn is clean). session.jsonl must hold the forged lines:
// otherwise the attack did not work and the test would prove nothing.
//
// It runs each driver in its default mode (the long-lived one where it
// has one) and, for the long-lived drivers, per turn as well. A CLI that
// prints another vocabulary per turn (codex) has its per-turn forgery in
// <driver>-per_turn.jsonl, and each mode is also attacked with the other
// mode's lines, which its parser must take for unknown (raw) lines. No CLI
// prevents the attack: every one runs its shell tool as its own user,
// with /proc readable.
func TestConformanceForgery(t *testing.T) {
	testenv.Runtime(t)
	var subs []subtest
	for _, name := range drivers.Names() {
		drv0 := drivers.All()[name](drivers.Endpoint{BaseURL: "http://x/v1", APIKey: "k", Provider: "sandbox"})
		_, longLived := drv0.(sandboxagent.LongLived)
		subs = append(subs, subtest{name, func(t *testing.T) {
			forgeryTurn(t, name, forgeryAttack{command: forgeCommand})
		}})
		if longLived {
			subs = append(subs, subtest{name + "/per_turn", func(t *testing.T) {
				forgeryTurn(t, name, forgeryAttack{perTurn: true, command: forgeCommand})
			}})
		}
		if _, err := os.Stat(otherVocabularyFile(name, false)); err == nil {
			// A CLI that prints another vocabulary in each mode: the
			// forged lines in the other mode's vocabulary.
			subs = append(subs, subtest{name + "/other_vocabulary", func(t *testing.T) {
				forgeryTurn(t, name, forgeryAttack{otherVocabulary: true, command: forgeCommand})
			}}, subtest{name + "/per_turn/other_vocabulary", func(t *testing.T) {
				forgeryTurn(t, name, forgeryAttack{perTurn: true, otherVocabulary: true, command: forgeCommand})
			}})
		}
		// The attacks on the long-lived turn's end (security review): one
		// driver of each long-lived kind (a CLI's own stream, a bridge),
		// not all five, to keep CI short.
		if name == "claude" || name == "opencode" {
			subs = append(subs, subtest{name + "/slow_tool", func(t *testing.T) {
				forgeryTurn(t, name, slowToolAttack(name))
			}}, subtest{name + "/side_request", func(t *testing.T) {
				forgeryTurn(t, name, sideRequestAttack())
			}})
		}
	}
	runConcurrently(t, subs)
}

// forgeryAttack is one way of running the forged lines in a turn.
type forgeryAttack struct {
	perTurn bool
	// otherVocabulary: the forged lines are in the vocabulary of the
	// CLI's other mode (forgedFile): its parser must take them for lines
	// it does not know (raw events), not for the turn's.
	otherVocabulary bool
	// command is what the model asks the shell tool to run.
	command string
	// files are uploaded (path, content) before the turn.
	files map[string]string
	// minTurn: the first turn cannot honestly end sooner (its tool runs
	// that long).
	minTurn time.Duration
	// check runs after the first turn's own checks.
	check func(t *testing.T, a *sandboxagent.Agent, res sandboxagent.TurnResult)
}

// slowToolSleep is how long the slow tool sleeps after the forged lines:
// longer than the quiet a long-lived turn waits after an end line the
// model's record does not back (5 s, verify.go's unbackedQuiet) counted
// from the CLI's last line. opencode's bridge prints nothing while a tool
// runs; claude prints a task_started line about 3 s into a Bash command,
// which restarts that quiet, so its tool sleeps longer (measured on the
// code before the fix: the forged end at 2.0 s, task_started at 4.9 s, the
// turn cut at 9.9 s).
func slowToolSleep(name string) time.Duration {
	if name == "claude" {
		return 12 * time.Second
	}
	return 7 * time.Second
}

// slowToolAttack: the forged turn, end included, then a tool that runs
// on in silence longer than the quiet fallback. The record says a call
// is still pending (its result has not reached the model): the forged
// end must not end the turn, however long the tool stays silent, and
// the turn must not be marked unbacked_end (its real end is backed).
func slowToolAttack(name string) forgeryAttack {
	secs := int(slowToolSleep(name) / time.Second)
	return forgeryAttack{
		command: forgeCommand + fmt.Sprintf(`; sleep %d; echo "sa-forgery: slept %d s"`, secs, secs),
		minTurn: slowToolSleep(name),
		check: func(t *testing.T, a *sandboxagent.Agent, res sandboxagent.TurnResult) {
			if !slices.ContainsFunc(res.Events, func(ev sandboxagent.Event) bool {
				return ev.Kind == sandboxagent.KindToolResult && strings.Contains(ev.Payload.Output, "sa-forgery: slept")
			}) {
				t.Errorf("the turn holds no result of the slow tool (it ended before the tool did)")
			}
		},
	}
}

// sidePath is the side request's script: it takes the sandbox's token and
// the model proxy's URL where the CLI has them (claude: its environment;
// opencode: the bridge's environment and opencode.json), both read
// through /proc/<exec root>/environ, as the CLI's user can, and POSTs the
// model route a body that is not JSON with that token. The upstream (the
// fake model) answers 400 without consuming its script. It prints the
// status, never the token.
const sidePath = "/tmp/sa-side.sh"

var sideScript = `envof() { tr '\000' '\n' < "$1/environ" 2>/dev/null | sed -n "s/^$2=//p" | head -n 1; }
url= hdr=
` + execRoots(`
	k=$(envof "$d" ANTHROPIC_API_KEY)
	if [ -n "$k" ]; then url="$(envof "$d" ANTHROPIC_BASE_URL)/v1/messages"; hdr="x-api-key: $k"; break; fi
	k=$(envof "$d" SANDBOX_AGENT_OPENCODE_API_KEY)
	if [ -n "$k" ]; then
		h=$(envof "$d" XDG_CONFIG_HOME); [ -n "$h" ] || h="$(envof "$d" HOME)/.config"
		base=$(sed -n 's/.*"baseURL": *"\([^"]*\)".*/\1/p' "$h/opencode/opencode.json" | head -n 1)
		url="$base/chat/completions"; hdr="Authorization: Bearer $k"; break
	fi`) + `
if [ -z "$url" ]; then echo "sa-side: no token found"; exit 0; fi
code=$(curl --noproxy '*' -sS --max-time 20 -o /dev/null -w '%{http_code}' -X POST \
	-H "$hdr" -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \
	--data-binary 'this body is not JSON' "$url")
echo "sa-side: POST ${url#http://*/} -> $code"
`

// sideRequestAttack: before the forged lines, a request of the tool's own
// with the sandbox's token, which the upstream fails (4xx). The record's
// last exchange is then a failed one while the CLI's tool call is still
// pending: that must not make the forged end look backed.
func sideRequestAttack() forgeryAttack {
	return forgeryAttack{
		command: "sh " + sidePath + "; " + forgeCommand,
		files:   map[string]string{sidePath: sideScript},
		check: func(t *testing.T, a *sandboxagent.Agent, res sandboxagent.TurnResult) {
			for _, ev := range res.Events {
				if ev.Kind == sandboxagent.KindToolResult && strings.Contains(ev.Payload.Output, "sa-side:") {
					t.Logf("the side request: %s", strings.TrimSpace(ev.Payload.Output))
				}
			}
			// The side request reached the model proxy, which forwarded
			// it (not denied) and got a 4xx: otherwise the turn did not
			// see the attack and the test proves nothing.
			dir := a.NetworkAuditDir()
			b, err := os.ReadFile(filepath.Join(dir, "model.jsonl"))
			if err != nil {
				t.Fatalf("model.jsonl: %v", err)
			}
			found := false
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var r struct {
					Status int    `json:"status"`
					Path   string `json:"path"`
					Denied bool   `json:"denied"`
				}
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("model.jsonl: %v: %s", err, l)
				}
				if r.Status >= 400 && r.Status < 500 && !r.Denied &&
					(strings.HasSuffix(r.Path, "/messages") || strings.HasSuffix(r.Path, "/chat/completions")) {
					found = true
					t.Logf("model.jsonl: the side request: %s", l)
				}
			}
			if !found {
				t.Fatalf("model.jsonl holds no forwarded 4xx completion request: the side request did not reach the proxy, the test proves nothing:\n%s", b)
			}
		},
	}
}

// isVerifiable reports whether events of kind k carry a verdict.
func isVerifiable(k sandboxagent.EventKind) bool {
	switch k {
	case sandboxagent.KindToolCall, sandboxagent.KindToolResult, sandboxagent.KindText, sandboxagent.KindThinking:
		return true
	}
	return false
}

// forgedText is the text of an event a forged line could have put there.
func forgedText(ev sandboxagent.Event) string {
	return ev.Payload.Text + "\n" + ev.Payload.Command + "\n" + ev.Payload.Output
}

func verdict(v *bool) string {
	if v == nil {
		return "absent"
	}
	return fmt.Sprint(*v)
}

// forgedFile is the forged turn of driver name in the vocabulary its CLI
// prints per turn (perTurn) or in its default mode: testdata/forgery/
// <name>-per_turn.jsonl for a CLI whose per-turn output differs from its
// long-lived one (codex: `codex exec --json` and app-server), else
// <name>.jsonl.
func forgedFile(name string, perTurn bool) string {
	if p := filepath.Join("testdata", "forgery", name+"-per_turn.jsonl"); perTurn {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return filepath.Join("testdata", "forgery", name+".jsonl")
}

// otherVocabularyFile is the forged turn in the vocabulary of the mode
// other than perTurn's; it exists only for a CLI that has two.
func otherVocabularyFile(name string, perTurn bool) string {
	if perTurn {
		return filepath.Join("testdata", "forgery", name+".jsonl")
	}
	return filepath.Join("testdata", "forgery", name+"-per_turn.jsonl")
}

func forgeryTurn(t *testing.T, name string, attack forgeryAttack) {
	file := forgedFile(name, attack.perTurn)
	if attack.otherVocabulary {
		file = otherVocabularyFile(name, attack.perTurn)
	}
	forged, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: attack.command},
		{Text: realReply},
		{Text: secondReply},
	}})
	drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
	_, longLived := drv.(sandboxagent.LongLived)
	turn := sandboxagent.Turn{Prompt: "x", LongLived: longLived && !attack.perTurn}
	if attack.otherVocabulary {
		checkUnknownLines(t, drv, turn, forged)
	} else {
		checkForgedLines(t, drv, turn, forged)
	}

	cfg := testenv.Config()
	cfg.AuditRoot = drivertest.AuditRoot(t)
	cfg.Timeouts.Ask = 4 * time.Minute
	cfg.PerTurn = attack.perTurn // whatever SANDBOX_AGENT_PER_TURN says: each mode has its subtest
	a := testenv.StartAgent(t, drv, cfg.AuditRoot, sandboxagent.WithConfig(cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := a.Container().WriteFile(ctx, forgedPath, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	for p, content := range attack.files {
		if err := a.Container().WriteFile(ctx, p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	res, err := a.Stream(ctx, "Run the command, then give your answer.", nil)
	t.Logf("first turn: %v", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d < attack.minTurn {
		t.Errorf("the first turn ended after %v, before its tool can have ended (%v)", d.Round(time.Millisecond), attack.minTurn)
	}
	if res.AuditDir == "" {
		t.Fatalf("turn: no audit folder (err %v, events %+v)", err, res.Events)
	}
	raw, rerr := os.ReadFile(filepath.Join(res.AuditDir, "session.jsonl"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !bytes.Contains(raw, []byte(forgedReply)) {
		// The attack did not reach the host: nothing below would mean anything.
		var out []string
		for _, ev := range res.Events {
			if ev.Kind == sandboxagent.KindToolResult {
				out = append(out, ev.Payload.Output)
			}
		}
		t.Fatalf("session.jsonl holds no forged line: the attack did not work (err %v; tool output %q)", err, out)
	}
	if err != nil {
		t.Fatalf("turn with forged lines: %v", err)
	}
	if res.Reply != realReply {
		t.Errorf("reply %q, want the model's %q", res.Reply, realReply)
	}
	if last := res.Events[len(res.Events)-1]; last.Kind != sandboxagent.KindDone || last.Payload.Text != realReply {
		t.Errorf("last event %+v, want done with %q", last, realReply)
	}

	if attack.otherVocabulary {
		checkIgnoredForgery(t, res, forged)
	} else {
		checkForgedEvents(t, res, raw, forged)
	}
	if attack.check != nil {
		attack.check(t, a, res)
	}

	// The forged turn end did not end the turn early: the next turn is
	// the next one, with nothing of this one in it.
	r2, err := a.Stream(ctx, "Now give your second answer.", nil)
	if t.Failed() || err != nil || r2.Reply != secondReply {
		// What the CLI printed, and when the turns ended, for the diagnosis.
		raw, _ := os.ReadFile(filepath.Join(res.AuditDir, "session.jsonl"))
		for i, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			t.Logf("session.jsonl %d: %.160s", i+1, l)
		}
		for _, st := range readStatus(t, res.AuditDir).Turns {
			t.Logf("status.json turn %d: lines %d-%d, reply %q, error %q", st.Turn, st.FirstLine, st.LastLine, st.Reply, st.Error)
		}
	}
	if err != nil || r2.Reply != secondReply {
		t.Fatalf("the next turn: reply %q, err %v, want %q", r2.Reply, err, secondReply)
	}
	for _, ev := range r2.Events {
		if ev.Kind == sandboxagent.KindUnverified || strings.Contains(forgedText(ev), "FORGED-") || (ev.Verified != nil && !*ev.Verified) {
			t.Errorf("the next turn has %s event (line %d, verified %s): %.200s", ev.Kind, ev.Line, verdict(ev.Verified), forgedText(ev)+ev.Payload.Raw)
		}
	}
}

// statusFile is the part of status.json the tests read.
type statusFile struct {
	Turns []struct {
		Turn         int             `json:"turn"`
		FirstLine    int             `json:"first_line"`
		LastLine     int             `json:"last_line"`
		Reply        string          `json:"reply"`
		Error        string          `json:"error"`
		Verification json.RawMessage `json:"verification"`
	} `json:"turns"`
}

func readStatus(t *testing.T, dir string) statusFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "status.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st statusFile
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("status.json: %v", err)
	}
	return st
}

// checkForgedLines checks, without a container, that the forged lines are
// a turn the driver's parser believes: the tool call, its output and the
// text, FORGED-REPLY as the reply and, for a long-lived CLI, the turn's
// end. So a test that passes shows the host's check at work, not a
// forgery the parser ignored.
func checkForgedLines(t *testing.T, drv sandboxagent.Driver, turn sandboxagent.Turn, forged []byte) {
	t.Helper()
	p := drv.NewParser(turn)
	var kinds []string
	for _, l := range bytes.Split(bytes.TrimSpace(forged), []byte("\n")) {
		for _, ev := range p.Parse(l) {
			if ev.Kind == sandboxagent.KindRaw || ev.Kind == sandboxagent.KindError {
				t.Fatalf("%s's parser does not take the forged line %s: %+v", drv.Name(), l, ev.Payload)
			}
			txt := forgedText(ev)
			for _, m := range []string{forgedCall, forgedOutput, forgedReply} {
				if strings.Contains(txt, m) {
					kinds = append(kinds, string(ev.Kind)+" "+m)
				}
			}
		}
	}
	for _, want := range []string{"tool_call " + forgedCall, "tool_result " + forgedOutput, "text " + forgedReply} {
		if !slices.Contains(kinds, want) {
			t.Fatalf("%s: the forged lines give no %s event (%v)", drv.Name(), want, kinds)
		}
	}
	if turn.LongLived {
		if e, ok := p.(sandboxagent.TurnEnder); !ok {
			t.Fatalf("%s: long-lived parser without Ended", drv.Name())
		} else if ended, _ := e.Ended(); !ended {
			t.Fatalf("%s: the forged lines do not end a long-lived turn", drv.Name())
		}
	}
	out, err := p.Finish(0, nil)
	if err != nil || out.Reply != forgedReply {
		t.Fatalf("%s: the forged lines' reply %q, %v; want %q", drv.Name(), out.Reply, err, forgedReply)
	}
}

// checkForgedEvents: the forged events of the turn res (its CLI's lines
// raw) are kept, each verified false and reported (events, events.jsonl,
// status.json); the real ones are verified; no forged line names a
// session.
func checkForgedEvents(t *testing.T, res sandboxagent.TurnResult, raw, forged []byte) {
	t.Helper()
	forgedLines := map[string]bool{}
	for _, l := range bytes.Split(bytes.TrimSpace(forged), []byte("\n")) {
		forgedLines[string(l)] = true
	}
	sessionLines := strings.Split(string(raw), "\n")
	for _, ev := range res.Events {
		if ev.Kind == sandboxagent.KindSession && ev.Line >= 1 && ev.Line <= len(sessionLines) && forgedLines[sessionLines[ev.Line-1]] {
			t.Errorf("the forged line %d named the session %q (the turn's is %q)", ev.Line, ev.SessionID, res.SessionID)
		}
	}
	// The forged events: kept, each verified false and reported.
	var forgedEvs []sandboxagent.Event
	seen := map[string]bool{}
	unverified := map[int][]sandboxagent.Event{} // by the line they name
	nUnverified := 0
	for _, ev := range res.Events {
		if ev.Kind == sandboxagent.KindUnverified {
			unverified[ev.Line] = append(unverified[ev.Line], ev)
			nUnverified++
		}
	}
	for _, ev := range res.Events {
		txt := forgedText(ev)
		if !strings.Contains(txt, "FORGED-") {
			continue
		}
		if ev.Kind == sandboxagent.KindRaw {
			t.Errorf("a forged line was not parsed (raw event): %.300s", ev.Payload.Raw)
		}
		if !isVerifiable(ev.Kind) {
			continue // the unverified reports, the error of a refused one, …
		}
		forgedEvs = append(forgedEvs, ev)
		for _, m := range []string{forgedCall, forgedOutput, forgedReply} {
			if strings.Contains(txt, m) {
				seen[string(ev.Kind)+" "+m] = true
			}
		}
		if ev.Verified == nil || *ev.Verified {
			t.Errorf("forged %s event (line %d) verified %s, want false: %+v", ev.Kind, ev.Line, verdict(ev.Verified), ev.Payload)
		}
		if i := slices.IndexFunc(unverified[ev.Line], func(u sandboxagent.Event) bool {
			return strings.Contains(u.Payload.Text, string(ev.Kind))
		}); i < 0 || ev.Line == 0 {
			t.Errorf("no unverified event names the forged %s event's line %d", ev.Kind, ev.Line)
		} else {
			t.Logf("unverified: %s", unverified[ev.Line][i].Payload.Text)
		}
	}
	for _, want := range []string{"tool_call " + forgedCall, "tool_result " + forgedOutput, "text " + forgedReply} {
		if !seen[want] {
			t.Errorf("no %s event: the forged lines did not become the events they claim", want)
		}
	}
	if nUnverified == 0 {
		t.Error("no unverified event")
	}
	rawLines := strings.Split(string(raw), "\n")
	for line, us := range unverified {
		if line < 1 || line > len(rawLines) || !strings.Contains(rawLines[line-1], "FORGED-") {
			for _, u := range us {
				t.Errorf("unverified event names line %d, which is not a forged line: %s", line, u.Payload.Text)
			}
		}
	}

	// The real tool call (the attack itself, which the model did ask for)
	// and the rest of the real turn are backed.
	realCall := slices.IndexFunc(res.Events, func(ev sandboxagent.Event) bool {
		return ev.Kind == sandboxagent.KindToolCall && strings.Contains(ev.Payload.Command, forgedPath)
	})
	if realCall < 0 {
		t.Errorf("no tool_call of the attack's command in %+v", res.Events)
	} else if v := res.Events[realCall].Verified; v == nil || !*v {
		t.Errorf("the real tool call (line %d) verified %s, want true", res.Events[realCall].Line, verdict(v))
	}
	for _, ev := range res.Events {
		if isVerifiable(ev.Kind) && !strings.Contains(forgedText(ev), "FORGED-") && (ev.Verified == nil || !*ev.Verified) {
			t.Errorf("real %s event (line %d) verified %s, want true: %.200s", ev.Kind, ev.Line, verdict(ev.Verified), forgedText(ev))
		}
		if ev.Kind == sandboxagent.KindToolResult && strings.Contains(ev.Payload.Output, "sa-forgery: wrote to") {
			t.Logf("the attack: %s", strings.TrimSpace(ev.Payload.Output))
		}
	}

	// The audit: the unverified records, the reply and the verification.
	evs, err := os.ReadFile(filepath.Join(res.AuditDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	audited := 0
	sc := bufio.NewScanner(bytes.NewReader(evs))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev sandboxagent.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("events.jsonl: %v", err)
		}
		if _, ok := unverified[ev.Line]; ok && ev.Kind == sandboxagent.KindUnverified {
			audited++
		}
	}
	if audited != nUnverified {
		t.Errorf("events.jsonl holds %d unverified records, the turn %d", audited, nUnverified)
	}
	st := readStatus(t, res.AuditDir)
	if n := len(st.Turns); n == 0 {
		t.Fatal("status.json: no turn")
	}
	last := st.Turns[len(st.Turns)-1]
	if last.Reply != realReply {
		t.Errorf("status.json: the turn's reply %q, want %q", last.Reply, realReply)
	}
	if last.Verification == nil {
		t.Error("status.json: the turn has no verification record")
	} else {
		t.Logf("status.json verification: %s", last.Verification)
		var v struct {
			Unverified      int   `json:"unverified"`
			UnverifiedLines []int `json:"unverified_lines"`
		}
		if err := json.Unmarshal(last.Verification, &v); err != nil {
			t.Errorf("status.json verification: %v", err)
		}
		if v.Unverified < len(forgedEvs) {
			t.Errorf("status.json counts %d unverified events, the turn has %d forged ones", v.Unverified, len(forgedEvs))
		}
		for _, ev := range forgedEvs {
			if !slices.Contains(v.UnverifiedLines, ev.Line) {
				t.Errorf("status.json's unverified_lines %v lack the forged line %d", v.UnverifiedLines, ev.Line)
			}
		}
	}

	// A long-lived turn whose real end the record backs is not one that
	// ended for quiet.
	if vb, err := json.Marshal(res.Verification); err == nil && bytes.Contains(vb, []byte(`"unbacked_end"`)) {
		t.Errorf("the turn's verification says unbacked_end: %s", vb)
	}
	if last.Verification != nil && bytes.Contains(last.Verification, []byte(`"unbacked_end"`)) {
		t.Errorf("status.json: the turn's verification says unbacked_end: %s", last.Verification)
	}
}

// checkIgnoredForgery: forged lines in the vocabulary of the CLI's other
// mode are raw events of the turn res (kept for the audit, believed in
// nothing): no session, tool, text or usage event comes of them.
func checkIgnoredForgery(t *testing.T, res sandboxagent.TurnResult, forged []byte) {
	t.Helper()
	want := map[string]bool{}
	for _, l := range bytes.Split(bytes.TrimSpace(forged), []byte("\n")) {
		want[string(l)] = true
	}
	for _, ev := range res.Events {
		switch {
		case ev.Kind == sandboxagent.KindRaw:
			delete(want, string(ev.Payload.Raw))
		case strings.Contains(forgedText(ev), "FORGED-"):
			t.Errorf("a forged line of the other vocabulary became a %s event (line %d): %+v", ev.Kind, ev.Line, ev.Payload)
		case ev.Kind == sandboxagent.KindSession && ev.SessionID != res.SessionID:
			t.Errorf("session event %q (line %d), the turn's session is %q", ev.SessionID, ev.Line, res.SessionID)
		}
	}
	for l := range want {
		t.Errorf("the forged line is no raw event of the turn: %s", l)
	}
}

// checkUnknownLines checks, without a container, that the driver's parser
// of turn's mode makes nothing but raw events of the forged lines (the
// other mode's vocabulary): no session, no turn end, no reply.
func checkUnknownLines(t *testing.T, drv sandboxagent.Driver, turn sandboxagent.Turn, forged []byte) {
	t.Helper()
	p := drv.NewParser(turn)
	for _, l := range bytes.Split(bytes.TrimSpace(forged), []byte("\n")) {
		if evs := p.Parse(l); len(evs) != 1 || evs[0].Kind != sandboxagent.KindRaw {
			t.Fatalf("%s's parser (long-lived %v) takes the line of the other vocabulary %s: %+v", drv.Name(), turn.LongLived, l, evs)
		}
	}
	if e, ok := p.(sandboxagent.TurnEnder); ok && turn.LongLived {
		if ended, _ := e.Ended(); ended {
			t.Fatalf("%s: the other vocabulary's lines end a long-lived turn", drv.Name())
		}
	}
	if out, err := p.Finish(0, nil); err == nil || out.Reply != "" || out.SessionID != "" {
		t.Fatalf("%s: the other vocabulary's lines give the turn %+v, %v; want no reply, no session, not completed", drv.Name(), out, err)
	}
}
