//go:build integration

package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/claude"
	"github.com/sandbox-agent/sandbox-agent/driver/codex"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// sessionDriver is a driver that forks, lists, deletes, dumps and loads
// sessions (asserted on the concrete driver, so it holds whether these
// are methods of Driver or optional interfaces).
type sessionDriver interface {
	Fork(ctx context.Context, c sandboxagent.ContainerOps, id string) (string, error)
	ListSessions(ctx context.Context, c sandboxagent.ContainerOps) ([]sandboxagent.SessionInfo, error)
	DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error
	DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error)
	LoadSession(ctx context.Context, c sandboxagent.ContainerOps, d sandboxagent.SessionDump) (string, error)
}

// What differs between the drivers' sessions.
var (
	// goneErr is what DumpSession of a deleted session wraps (nil: any
	// error).
	goneErr = map[string]error{
		"claude":   sandboxagent.ErrPathNotFound,
		"dsh":      sandboxagent.ErrPathNotFound,
		"pi":       sandboxagent.ErrPathNotFound,
		"codex":    codex.ErrSessionNotFound,
		"opencode": nil,
	}
	// forkNeedsParent: the fork refers to the original's history, so the
	// original cannot be deleted while the fork lives.
	forkNeedsParent = map[string]bool{"codex": true}
	// resumeGoneMessage is in the DriverError of a turn on a deleted
	// session.
	resumeGoneMessage = map[string]string{"claude": "No conversation found"}
	// idPrefix starts every session id.
	idPrefix = map[string]string{"dsh": "session-", "opencode": "ses_"}
	// forkDumpFiles is the number of files in a fork's dump (0: any).
	forkDumpFiles = map[string]int{"codex": 2} // the fork and its parent
	// exitRecordsOnly: a long-lived CLI appends these records to the
	// session it served when its process stops (the agent moving to
	// another session); they change no history.
	exitRecordsOnly = map[string]func(before, after []byte, id string) bool{"claude": claude.ExitRecordsOnly}
)

// holds reports whether any file of d contains s.
func holds(d sandboxagent.SessionDump, s string) bool {
	for _, data := range d.Files {
		if bytes.Contains(data, []byte(s)) {
			return true
		}
	}
	return false
}

// TestConformanceSessions runs one scenario on every driver with
// sessions: fork a session and continue the fork (it has the history, the
// original does not get the fork's turn); dump the fork, load it into
// another container (through JSON, as a caller stores it) and continue it
// there; delete and list.
func TestConformanceSessions(t *testing.T) {
	for _, name := range drivers.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "ONE"}}})
			newDriver := func() sandboxagent.Driver {
				return drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
			}
			drv, ok := newDriver().(sessionDriver)
			if !ok {
				t.Skipf("%s has no sessions", name)
			}
			// A generous turn timeout: a CLI start on a loaded 2-core
			// machine (opencode's Bun bundle, dsh's 300 modules) takes
			// minutes.
			start := func() *sandboxagent.Agent {
				cfg := testenv.Config()
				cfg.AuditRoot = drivertest.AuditRoot(t)
				cfg.Timeouts.Ask = 5 * time.Minute
				return testenv.StartAgent(t, drv.(sandboxagent.Driver), cfg.AuditRoot, sandboxagent.WithConfig(cfg))
			}
			a, b := start(), start()
			if b.Container().Name() == a.Container().Name() {
				t.Fatal("same container")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
			defer cancel()
			ask := func(ag *sandboxagent.Agent, prompt string) string {
				t.Helper()
				n := len(srv.Requests())
				if _, err := ag.Ask(ctx, prompt); err != nil {
					t.Fatalf("%q: %v", prompt, err)
				}
				return drivertest.RequestText(t, srv, n)
			}
			ids := func(ag *sandboxagent.Agent) []string {
				t.Helper()
				list, err := drv.ListSessions(ctx, ag.Container())
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, s := range list {
					out = append(out, s.ID)
				}
				return out
			}

			ask(a, "ORIGIN-PROMPT-a41")
			origin := a.SessionID()
			before, err := drv.DumpSession(ctx, a.Container(), origin)
			if err != nil {
				t.Fatal(err)
			}

			// Fork: a new id, no model request.
			n := len(srv.Requests())
			fork, err := drv.Fork(ctx, a.Container(), origin)
			if errors.Is(err, sandboxagent.ErrUnsupported) {
				t.Skipf("%s does not fork: %v", name, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if fork == origin || fork == "" || !strings.HasPrefix(fork, idPrefix[name]) {
				t.Fatalf("fork id %q (original %q)", fork, origin)
			}
			if len(srv.Requests()) != n {
				t.Error("fork made a model request")
			}
			if got := ids(a); !slices.Contains(got, origin) || !slices.Contains(got, fork) {
				t.Errorf("sessions after the fork %v, want %s and %s", got, origin, fork)
			}

			// A turn on the fork has the original's history and does not
			// reach the original.
			a.SetSession(fork)
			if body := ask(a, "FORK-ONLY-PROMPT-b52"); !strings.Contains(body, "ORIGIN-PROMPT-a41") || !strings.Contains(body, "FORK-ONLY-PROMPT-b52") {
				t.Error("the fork's request lacks the history")
			}
			if a.SessionID() != fork {
				t.Errorf("fork turn ended in session %s, fork %s", a.SessionID(), fork)
			}
			after, err := drv.DumpSession(ctx, a.Container(), origin)
			if err != nil {
				t.Fatal(err)
			}
			if holds(after, "FORK-ONLY-PROMPT-b52") || !holds(after, "ORIGIN-PROMPT-a41") {
				t.Error("the original's dump holds the fork's turn, or lacks its own")
			}
			if name != "opencode" { // opencode's dump is an export, not the stored files
				for f, data := range before.Files {
					if !bytes.Equal(after.Files[f], data) && (exitRecordsOnly[name] == nil || !exitRecordsOnly[name](data, after.Files[f], origin)) {
						t.Errorf("the fork's turn changed the original's %s", f)
					}
				}
				if len(after.Files) != len(before.Files) {
					t.Errorf("the original has %d files after the fork's turn, %d before", len(after.Files), len(before.Files))
				}
			}
			a.SetSession(origin)
			if body := ask(a, "BACK-ON-ORIGIN-c63"); strings.Contains(body, "FORK-ONLY-PROMPT-b52") || !strings.Contains(body, "ORIGIN-PROMPT-a41") {
				t.Error("the original's next turn saw the fork's turn, or lost its own")
			}

			// Dump the fork, store it as JSON, load it into b and continue.
			fd, err := drv.DumpSession(ctx, a.Container(), fork)
			if err != nil {
				t.Fatal(err)
			}
			if fd.Driver != name || fd.SessionID != fork || len(fd.Files) == 0 || !holds(fd, "FORK-ONLY-PROMPT-b52") {
				t.Errorf("fork dump: driver %q session %q, %d files, with the fork's turn %v", fd.Driver, fd.SessionID, len(fd.Files), holds(fd, "FORK-ONLY-PROMPT-b52"))
			}
			if want := forkDumpFiles[name]; want != 0 && len(fd.Files) != want {
				t.Errorf("fork dump has %d files, want %d", len(fd.Files), want)
			}
			if holds(fd, drivertest.Key) || holds(after, drivertest.Key) {
				t.Error("a dump holds the API key")
			}
			js, err := json.Marshal(fd)
			if err != nil {
				t.Fatal(err)
			}
			var dump sandboxagent.SessionDump
			if err := json.Unmarshal(js, &dump); err != nil {
				t.Fatal(err)
			}
			id, err := drv.LoadSession(ctx, b.Container(), dump)
			if err != nil || id != fork {
				t.Fatalf("LoadSession = %q, %v; want %s", id, err, fork)
			}
			b.SetSession(id)
			body := ask(b, "AFTER-LOAD-d74")
			if !strings.Contains(body, "ORIGIN-PROMPT-a41") || !strings.Contains(body, "FORK-ONLY-PROMPT-b52") || strings.Contains(body, "BACK-ON-ORIGIN-c63") {
				t.Error("the loaded session's request does not hold exactly its own history")
			}
			if b.SessionID() != fork {
				t.Errorf("loaded session continued as %s, want %s", b.SessionID(), fork)
			}

			// Delete.
			if forkNeedsParent[name] {
				if err := drv.DeleteSession(ctx, a.Container(), origin); err == nil {
					t.Error("deleting a session a fork depends on succeeded")
				}
			}
			if err := drv.DeleteSession(ctx, a.Container(), fork); err != nil {
				t.Fatal(err)
			}
			if got := ids(a); slices.Contains(got, fork) || !slices.Contains(got, origin) {
				t.Errorf("sessions after deleting the fork %v, want %s only", got, origin)
			}
			_, err = drv.DumpSession(ctx, a.Container(), fork)
			if want := goneErr[name]; err == nil || (want != nil && !errors.Is(err, want)) {
				t.Errorf("dump of the deleted fork: %v, want %v", err, want)
			}
			// A deleted session cannot be continued: a DriverError, not a
			// fresh session.
			a.SetSession(fork)
			_, err = a.Stream(ctx, "again", nil)
			var de *sandboxagent.DriverError
			if !errors.As(err, &de) || !strings.Contains(de.Message, resumeGoneMessage[name]) {
				t.Errorf("a turn on the deleted fork: %v", err)
			}
			if err := drv.DeleteSession(ctx, a.Container(), origin); err != nil {
				t.Fatal(err)
			}
			if got := ids(a); slices.Contains(got, origin) || slices.Contains(got, fork) {
				t.Errorf("sessions after deleting both %v", got)
			}
			// The loaded session goes too (codex's index does not know
			// it: the files are removed).
			if err := drv.DeleteSession(ctx, b.Container(), fork); err != nil {
				t.Errorf("delete the loaded fork: %v", err)
			}
			if got := ids(b); slices.Contains(got, fork) {
				t.Errorf("sessions in b after the delete %v", got)
			}
		})
	}
}
