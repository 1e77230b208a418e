package smoke

// The turn steps: container I/O, a first ask, its tool events, and a
// continued turn that must remember the first.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
)

// containerIO: exec with exit code and both streams, write and read back a
// file with quotes and non-ASCII, download it, and a command past its
// timeout killed with exit 124.
func (r *run) containerIO(ctx context.Context) error {
	sb := r.agent.Container()
	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo out; echo err >&2; exit 7"})
	if err != nil {
		return err
	}
	if res.ExitCode != 7 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		return fmt.Errorf("exec: code %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	content := []byte("smoke \"quoted\"\nünïcode " + r.marker + "\n")
	if err := sb.WriteFile(ctx, "/tmp/smoke/io.txt", content, 0o644); err != nil {
		return err
	}
	got, err := sb.ReadFile(ctx, "/tmp/smoke/io.txt", 0)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, content) {
		return fmt.Errorf("read back %q", got)
	}
	dst, err := os.MkdirTemp("", "sandbox-agent-smoke-dl-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dst)
	if _, err := sb.Download(ctx, "/tmp/smoke", dst); err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(dst, "smoke", "io.txt")); err != nil || !bytes.Equal(b, content) {
		return fmt.Errorf("downloaded %q (%v)", b, err)
	}
	res, err = sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "sleep 60 & sleep 60"}, Timeout: time.Second})
	if err != nil {
		return err
	}
	if !res.TimedOut || res.ExitCode != 124 {
		return fmt.Errorf("timeout: %+v", res)
	}
	return nil
}

const (
	smokeFile = "/tmp/smoke-out.txt"
	// thinkingMarker is in the fake model's reasoning of the first turn.
	thinkingMarker = "THINKING-MARKER"
)

// ask: the first turn runs a shell tool and answers DONE; its events and
// session are kept for the next steps. The fake model also reasons and
// reports token counts (tool_events checks the events).
func (r *run) ask(ctx context.Context) error {
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{
		{Thinking: thinkingMarker + " reasoning", Tool: fakemodel.ToolShell, Command: "echo hi > " + smokeFile},
		{Text: "DONE", Usage: &fakemodel.Usage{InputTokens: 321, OutputTokens: 12}},
	}}); err != nil {
		return err
	}
	r.firstPrompt = "Smoke test " + r.marker + ": run the shell command `echo hi > " + smokeFile + "`, then answer with the single word DONE."
	res, err := r.agent.Stream(ctx, r.firstPrompt, nil)
	r.firstTurn = res
	r.origSession = res.SessionID
	if err != nil {
		return err
	}
	if r.fake != nil && res.Reply != "DONE" {
		return fmt.Errorf("reply %q, want DONE", res.Reply)
	}
	if strings.TrimSpace(res.Reply) == "" {
		return errors.New("empty reply")
	}
	b, err := r.agent.Container().ReadFile(ctx, smokeFile, 0)
	if err != nil {
		return fmt.Errorf("the tool's file: %w", err)
	}
	if string(b) != "hi\n" {
		return fmt.Errorf("%s holds %q", smokeFile, b)
	}
	return nil
}

// toolEvents: the first turn reported the tool call (with its command) and
// its result; with the fake model, the turn ended with a done event
// carrying the reply, and a driver that declares thinking or usage
// reported the model's reasoning and token counts.
func (r *run) toolEvents() error {
	evs := r.firstTurn.Events
	if evs == nil {
		return errors.New("no turn to inspect (ask failed)")
	}
	if r.fake != nil {
		if last := evs[len(evs)-1]; last.Kind != sandboxagent.KindDone || last.Payload.Text != "DONE" {
			return fmt.Errorf("last event %+v, want done with DONE", last)
		}
		var thinking, usage bool
		for _, e := range evs {
			switch e.Kind {
			case sandboxagent.KindThinking:
				thinking = thinking || strings.Contains(e.Payload.Text, thinkingMarker)
			case sandboxagent.KindUsage:
				usage = usage || e.Payload.InputTokens > 0 || e.Payload.OutputTokens > 0
			}
		}
		if r.caps.Thinking && !thinking {
			return errors.New("declares Thinking but no thinking event carried the model's reasoning")
		}
		if r.caps.Usage && !usage {
			return errors.New("declares Usage but reported no token counts")
		}
	}
	var call *sandboxagent.Event
	for i, e := range r.firstTurn.Events {
		if e.Kind == sandboxagent.KindToolCall && strings.Contains(e.Payload.Command, "echo hi > "+smokeFile) {
			call = &r.firstTurn.Events[i]
			for _, later := range r.firstTurn.Events[i+1:] {
				if later.Kind == sandboxagent.KindToolResult && (call.Payload.CallID == "" || later.Payload.CallID == call.Payload.CallID) {
					return nil
				}
			}
			return fmt.Errorf("tool_call %s has no tool_result after it", call.Payload.CallID)
		}
	}
	return fmt.Errorf("no tool_call carrying the command among %d events", len(r.firstTurn.Events))
}

// requestsSince returns the bodies of the fake model's requests after n.
func (r *run) requestsSince(n int) string {
	var b strings.Builder
	for _, q := range r.fake.Requests()[n:] {
		b.Write(q.Body)
		b.WriteByte('\n')
	}
	return b.String()
}

// sawInRequests reports whether text reached the model after request n.
func (r *run) sawInRequests(n int, text string) bool {
	return strings.Contains(r.requestsSince(n), text)
}

// continueStep: a second turn of the same session sees the first turn's
// marker (in the model's request with the fake model; in the reply with a
// real one), in the same audit folder, with no event the parser did not
// understand.
func (r *run) continueStep(ctx context.Context) error {
	if !r.caps.Continue {
		return na("driver declares no continue")
	}
	if r.origSession == "" {
		return errors.New("no session from the first turn")
	}
	if r.fake == nil {
		reply, err := r.agent.Ask(ctx, "What was the code word in my first message? Answer with the word only.")
		if err != nil {
			return err
		}
		if !strings.Contains(reply, r.marker) {
			return fmt.Errorf("reply %q does not recall %s", reply, r.marker)
		}
		return nil
	}
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "SECOND"}}}); err != nil {
		return err
	}
	n := len(r.fake.Requests())
	res, err := r.agent.Stream(ctx, "Second turn "+r.marker+"-2", nil)
	r.secondTurn = res
	if err != nil {
		return err
	}
	if res.SessionID != r.origSession {
		return fmt.Errorf("session changed: %s → %s", r.origSession, res.SessionID)
	}
	if res.AuditDir != r.firstTurn.AuditDir {
		return fmt.Errorf("the second turn's audit folder %s, the first's %s", res.AuditDir, r.firstTurn.AuditDir)
	}
	for _, e := range res.Events {
		if e.Kind == sandboxagent.KindRaw {
			return fmt.Errorf("the second turn has a raw event: %.300s", e.Payload.Raw)
		}
	}
	if !r.sawInRequests(n, "Smoke test "+r.marker) {
		return errors.New("the model did not see the first turn")
	}
	return nil
}
