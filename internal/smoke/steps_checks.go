package smoke

// The checking steps: the audit trail on disk, and a bad key that must
// fail as a DriverError.

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

// auditStep: the first turn's audit folder holds session.jsonl (the raw
// stdout), events.jsonl pointing back to its lines, and status.json; a
// second turn of the session numbered its lines on in the same files; the
// key appears in none of them.
func (r *run) auditStep() error {
	dir := r.firstTurn.AuditDir
	if dir == "" {
		return errors.New("the first turn has no audit folder")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "session.jsonl"))
	if err != nil {
		return err
	}
	events, err := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "status.json")); err != nil {
		return err
	}
	maxLine := 0
	for _, e := range r.firstTurn.Events {
		maxLine = max(maxLine, e.Line)
	}
	if r.secondTurn.AuditDir == dir {
		first := maxLine
		for _, e := range r.secondTurn.Events {
			if e.Line != 0 && e.Line <= first {
				return fmt.Errorf("the second turn's event points to line %d, the first turn's end at line %d", e.Line, first)
			}
			maxLine = max(maxLine, e.Line)
		}
	}
	if lines := bytes.Count(raw, []byte("\n")); lines < maxLine || maxLine == 0 {
		return fmt.Errorf("session.jsonl has %d lines, events point to line %d", lines, maxLine)
	}
	if bytes.Count(events, []byte("\n")) < len(r.firstTurn.Events)+len(r.secondTurn.Events) {
		return errors.New("events.jsonl has fewer lines than the turn's events")
	}
	key := r.ep.APIKey
	if len(key) < 4 {
		return nil
	}
	return filepath.WalkDir(r.audit, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(key)) {
			return fmt.Errorf("the API key appears in %s", p)
		}
		return nil
	})
}

// badKey: an agent with a wrong key fails its turn with a *DriverError
// with a message and without the key, never an empty success. The
// deadline only guards against a hang (a retry loop shows as many
// requests, not as seconds).
func (r *run) badKey(ctx context.Context) error {
	bad := r.ep
	bad.APIKey = "sk-invalid-" + randHex(12)
	a, err := r.start(bad)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "SHOULD NOT HAPPEN"}}}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	_, err = a.Ask(ctx, "Say hello.")
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) {
		return fmt.Errorf("want a DriverError, got %v", err)
	}
	if de.Message == "" {
		return errors.New("DriverError without a message")
	}
	if strings.Contains(de.Error()+de.Stderr, bad.APIKey) {
		return errors.New("the key leaked into the DriverError")
	}
	return nil
}
