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
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
)

// auditStep: the first turn's audit folder holds session.jsonl (the raw
// stdout), events.jsonl pointing back to its lines, and status.json; the
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
	if lines := bytes.Count(raw, []byte("\n")); lines < maxLine || maxLine == 0 {
		return fmt.Errorf("session.jsonl has %d lines, events point to line %d", lines, maxLine)
	}
	if bytes.Count(events, []byte("\n")) < len(r.firstTurn.Events) {
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

// badKey: an agent with a wrong key fails its turn with a *DriverError,
// never an empty success.
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
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	_, err = a.Ask(ctx, "Say hello.")
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) {
		return fmt.Errorf("want a DriverError, got %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		return fmt.Errorf("DriverError after %v (want < 30s)", d.Round(time.Second))
	}
	return nil
}
