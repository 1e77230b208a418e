package smoke

// The session steps: fork isolation, skills and rules, delete and dump,
// and loading a dump into another container.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/claude"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
)

// sessionText is the dump of a session as one string.
func sessionText(d sandboxagent.SessionDump) string {
	var b strings.Builder
	for _, f := range d.Files {
		b.Write(f)
	}
	return b.String()
}

// exitRecordsOnly: a long-lived CLI appends these records to the session
// it served when its process stops (the agent moving to another session);
// they change no history.
var exitRecordsOnly = map[string]func(before, after []byte, id string) bool{"claude": claude.ExitRecordsOnly}

// unchanged reports whether every file of after is the same file of
// before, or that with only driver's exit records of session id appended.
func unchanged(driver string, before, after sandboxagent.SessionDump, id string) bool {
	if len(after.Files) != len(before.Files) {
		return false
	}
	for name, old := range before.Files {
		now, ok := after.Files[name]
		if !ok || !bytes.Equal(now, old) && (exitRecordsOnly[driver] == nil || !exitRecordsOnly[driver](old, now, id)) {
			return false
		}
	}
	return true
}

// forkIsolation: a turn on a fork changes the fork only; the original
// session's dump is unchanged (but for a long-lived CLI's exit records)
// and its next turn does not see the fork's.
func (r *run) forkIsolation(ctx context.Context) error {
	if !r.caps.Fork {
		return na("driver declares no fork")
	}
	if r.origSession == "" {
		return errors.New("no session to fork")
	}
	var before sandboxagent.SessionDump
	var err error
	if r.caps.Sessions {
		if before, err = r.agent.DumpSession(ctx, r.origSession); err != nil {
			return fmt.Errorf("dump before fork: %w", err)
		}
	}
	n := 0
	if r.fake != nil {
		n = len(r.fake.Requests())
	}
	fork, err := r.agent.ForkSession(ctx, r.origSession)
	if err != nil {
		return err
	}
	if fork == "" || fork == r.origSession {
		return fmt.Errorf("fork id %q", fork)
	}
	r.forkSession = fork
	if r.fake != nil && len(r.fake.Requests()) != n {
		return errors.New("the fork made a model request")
	}
	if r.caps.Sessions {
		list, err := r.agent.ListSessions(ctx)
		if err != nil {
			return fmt.Errorf("list after the fork: %w", err)
		}
		if !hasSession(list, r.origSession) || !hasSession(list, fork) {
			return fmt.Errorf("sessions after the fork %+v, want %s and %s", list, r.origSession, fork)
		}
	}
	forkMarker := "FORK-" + r.marker
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "FORKED"}, {Text: "ORIGINAL"}}}); err != nil {
		return err
	}
	r.agent.SetSession(fork)
	if r.fake != nil {
		n = len(r.fake.Requests())
	}
	res, err := r.agent.Stream(ctx, "On the fork: "+forkMarker, nil)
	if err != nil {
		return fmt.Errorf("turn on the fork: %w", err)
	}
	if res.SessionID != fork {
		return fmt.Errorf("turn on the fork ran in session %s", res.SessionID)
	}
	if r.fake != nil && !r.sawInRequests(n, "Smoke test "+r.marker) {
		return errors.New("the fork does not carry the original history")
	}
	if r.caps.Sessions {
		after, err := r.agent.DumpSession(ctx, r.origSession)
		if err != nil {
			return fmt.Errorf("dump after fork: %w", err)
		}
		if strings.Contains(sessionText(after), forkMarker) {
			return errors.New("the fork's turn appears in the original session's files")
		}
		if !unchanged(r.t.Name, before, after, r.origSession) {
			return errors.New("the original session's files changed while the fork ran")
		}
		forkDump, err := r.agent.DumpSession(ctx, fork)
		if err != nil {
			return fmt.Errorf("dump fork: %w", err)
		}
		if !strings.Contains(sessionText(forkDump), forkMarker) {
			return errors.New("the fork's own files lack its turn")
		}
	}
	// The original can still be continued, without the fork's turn.
	r.agent.SetSession(r.origSession)
	if r.fake != nil {
		n = len(r.fake.Requests())
	}
	res, err = r.agent.Stream(ctx, "Back on the original "+r.marker, nil)
	if err != nil {
		return fmt.Errorf("continue the original: %w", err)
	}
	if res.SessionID != r.origSession {
		return fmt.Errorf("original continued in session %s", res.SessionID)
	}
	if r.fake != nil && r.sawInRequests(n, forkMarker) {
		return errors.New("the original session saw the fork's turn")
	}
	return nil
}

// skillsRules: installed rules and a skill reach the model in the next
// turn.
func (r *run) skillsRules(ctx context.Context) error {
	if !r.caps.Rules && !r.caps.Skills {
		return na("driver declares neither skills nor rules")
	}
	rule := "RULE-" + r.marker
	skillDesc := "SKILL-" + r.marker
	if r.caps.Rules {
		if err := r.agent.InstallRules(ctx, "Smoke rule "+rule+": keep answers short.\n"); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
	}
	if r.caps.Skills {
		skill := sandboxagent.Skill{Name: "smoke-skill", Files: map[string][]byte{
			"SKILL.md":  []byte("---\nname: smoke-skill\ndescription: " + skillDesc + " a smoke-test skill\n---\n\nSay hello.\n"),
			"notes.txt": []byte("extra file\n"),
		}}
		if err := r.agent.InstallSkill(ctx, skill); err != nil {
			return fmt.Errorf("skill: %w", err)
		}
	}
	if r.fake == nil {
		return nil // a real model gives no reliable way to see its prompt
	}
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "RULES"}}}); err != nil {
		return err
	}
	// A fresh session: CLIs read rules and skills when a session starts.
	prev := r.agent.SessionID()
	r.agent.SetSession("")
	defer r.agent.SetSession(prev)
	n := len(r.fake.Requests())
	if _, err := r.agent.Ask(ctx, "Rules check "+r.marker); err != nil {
		return err
	}
	if r.caps.Rules && !r.sawInRequests(n, rule) {
		return errors.New("the rules text did not reach the model")
	}
	if r.caps.Skills && !r.sawInRequests(n, skillDesc) && !r.sawInRequests(n, "smoke-skill") {
		return errors.New("the skill did not reach the model")
	}
	return nil
}

// deleteDump: list shows the session, dump captures its turns without
// the key (kept for load as a caller stores it, through JSON), and delete
// removes the fork (or the session) from the list; the deleted session
// cannot be dumped, nor continued (a DriverError, not a fresh session).
func (r *run) deleteDump(ctx context.Context) error {
	if !r.caps.Sessions {
		return na("driver declares no session list/delete/dump/load")
	}
	list, err := r.agent.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if !hasSession(list, r.origSession) {
		return fmt.Errorf("list lacks %s: %+v", r.origSession, list)
	}
	d, err := r.agent.DumpSession(ctx, r.origSession)
	if err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	if len(d.Files) == 0 || !strings.Contains(sessionText(d), r.marker) {
		return errors.New("the dump does not hold the session's turns")
	}
	if d.Driver != r.t.Name || d.SessionID != r.origSession {
		return fmt.Errorf("dump of driver %q session %q, want %s %s", d.Driver, d.SessionID, r.t.Name, r.origSession)
	}
	if key := r.ep.APIKey; len(key) >= 4 && strings.Contains(sessionText(d), key) {
		return errors.New("the dump holds the API key")
	}
	js, err := json.Marshal(d)
	if err != nil {
		return err
	}
	r.dump = sandboxagent.SessionDump{}
	if err := json.Unmarshal(js, &r.dump); err != nil {
		return fmt.Errorf("the dump through JSON: %w", err)
	}
	victim := r.forkSession
	if victim == "" {
		victim = r.origSession
	}
	if err := r.agent.DeleteSession(ctx, victim); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	list, err = r.agent.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("list after delete: %w", err)
	}
	if hasSession(list, victim) {
		return fmt.Errorf("%s still listed after delete", victim)
	}
	if _, err := r.agent.DumpSession(ctx, victim); err == nil {
		return fmt.Errorf("dump of the deleted %s succeeded", victim)
	}
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "SHOULD NOT HAPPEN"}}}); err != nil {
		return err
	}
	prev := r.agent.SessionID()
	r.agent.SetSession(victim)
	defer r.agent.SetSession(prev)
	_, err = r.agent.Stream(ctx, "A turn on the deleted session", nil)
	if de := (*sandboxagent.DriverError)(nil); !errors.As(err, &de) {
		return fmt.Errorf("a turn on the deleted %s: %v, want a DriverError", victim, err)
	}
	return nil
}

// hasSession reports whether list holds id.
func hasSession(list []sandboxagent.SessionInfo, id string) bool {
	for _, s := range list {
		if s.ID == id {
			return true
		}
	}
	return false
}

// load: the dump goes into a second container and a turn there continues
// it.
func (r *run) load(ctx context.Context) error {
	if !r.caps.Sessions {
		return na("driver declares no session dump/load")
	}
	if r.dump.Files == nil {
		return errors.New("no dump from the previous step")
	}
	other, err := r.start(r.ep)
	if err != nil {
		return fmt.Errorf("second container: %w", err)
	}
	defer other.Close()
	id, err := other.LoadSession(ctx, r.dump)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "LOADED"}}}); err != nil {
		return err
	}
	n := 0
	if r.fake != nil {
		n = len(r.fake.Requests())
	}
	res, err := other.Stream(ctx, "Continue in another container "+r.marker, nil)
	if err != nil {
		return fmt.Errorf("continue the loaded session: %w", err)
	}
	if id != r.dump.SessionID || res.SessionID != id {
		return fmt.Errorf("dumped session %s, loaded %s, turn ran in %s", r.dump.SessionID, id, res.SessionID)
	}
	if r.fake != nil && !r.sawInRequests(n, "Smoke test "+r.marker) {
		return errors.New("the model did not see the loaded history")
	}
	if r.fake != nil && r.forkSession != "" && r.sawInRequests(n, "FORK-"+r.marker) {
		return errors.New("the loaded session's history holds the fork's turn")
	}
	return nil
}
