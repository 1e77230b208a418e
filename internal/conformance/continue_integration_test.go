//go:build integration

package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// Rules and skills, where a driver installs them (asserted on the
// concrete driver, as sessionDriver).
type (
	rulesInstaller interface {
		InstallRules(ctx context.Context, c sandboxagent.ContainerOps, rules string) error
	}
	skillInstaller interface {
		InstallSkill(ctx context.Context, c sandboxagent.ContainerOps, s sandboxagent.Skill) error
	}
)

var (
	// skillListing is how the CLI lists the skill to the model.
	skillListing = map[string]string{
		"claude": "marker-skill: SKILL-MARKER-3c9 explains markers",
		"codex":  "marker-skill: SKILL-MARKER-3c9 explains markers",
		"pi":     "<name>marker-skill</name>",
	}
	// sessionTitle is the session's title after the two turns ("*": any
	// but empty, "": any).
	sessionTitle = map[string]string{"claude": second, "pi": first, "dsh": "*", "opencode": "*"}
	// keyDirs are folders besides the home where the CLI keeps files.
	keyDirs = map[string][]string{"opencode": {"/tmp"}}
)

const (
	first  = "FIRST-PROMPT-5e2 remember this"
	second = "SECOND-PROMPT what did I say?"
)

// TestConformanceContinue: installed rules and a skill reach the model;
// a second turn continues the session (its request carries turn 1) in the
// same audit folder, lines numbered on; the session is listed.
func TestConformanceContinue(t *testing.T) {
	for _, name := range drivers.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "FIRST"}, {Text: "SECOND"}}})
			drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
			cfg := testenv.Config()
			cfg.AuditRoot = drivertest.AuditRoot(t)
			cfg.Timeouts.Ask = 5 * time.Minute
			a := testenv.StartAgent(t, drv, cfg.AuditRoot, sandboxagent.WithConfig(cfg))
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()

			const rules = "RULES-MARKER-7d1: answer in one word."
			var want []string
			if ri, ok := drv.(rulesInstaller); ok {
				if err := ri.InstallRules(ctx, a.Container(), rules+"\n"); err == nil {
					want = append(want, rules)
				} else if !errors.Is(err, sandboxagent.ErrUnsupported) {
					t.Fatal(err)
				}
			}
			skill := sandboxagent.Skill{Name: "marker-skill", Files: map[string][]byte{
				"SKILL.md":      []byte("---\nname: marker-skill\ndescription: SKILL-MARKER-3c9 explains markers\n---\n\n# Marker\nUse markers.\n"),
				"scripts/do.sh": []byte("#!/bin/sh\necho marker\n"),
			}}
			if si, ok := drv.(skillInstaller); ok {
				if err := si.InstallSkill(ctx, a.Container(), skill); err == nil {
					want = append(want, "marker-skill", "SKILL-MARKER-3c9 explains markers", skillListing[name])
				} else if !errors.Is(err, sandboxagent.ErrUnsupported) {
					t.Fatal(err)
				}
			}

			r1, err := a.Stream(ctx, first, nil)
			if err != nil || r1.Reply != "FIRST" {
				t.Fatalf("turn 1: %q, %v", r1.Reply, err)
			}
			body := drivertest.RequestText(t, srv, 0)
			for _, w := range want {
				if !strings.Contains(body, w) {
					t.Errorf("turn 1's request lacks %q", w)
				}
			}

			n := len(srv.Requests())
			r2, err := a.Stream(ctx, second, nil)
			if err != nil || r2.Reply != "SECOND" {
				t.Fatalf("turn 2: %q, %v", r2.Reply, err)
			}
			if r1.SessionID == "" || r2.SessionID != r1.SessionID {
				t.Errorf("sessions %q then %q", r1.SessionID, r2.SessionID)
			}
			body = drivertest.RequestText(t, srv, n)
			for _, w := range []string{first, "FIRST\n", "SECOND-PROMPT"} {
				if !strings.Contains(body, w) {
					t.Errorf("turn 2's request lacks %q: the session was not continued", w)
				}
			}
			maxLine := 0
			for _, ev := range r2.Events {
				maxLine = max(maxLine, ev.Line)
				if ev.Kind == sandboxagent.KindRaw {
					t.Errorf("turn 2 raw event %+v", ev)
				}
			}
			// Both turns in one audit folder, lines numbered on.
			if r2.AuditDir != r1.AuditDir {
				t.Errorf("audit folders %s, %s", r1.AuditDir, r2.AuditDir)
			}
			drivertest.CheckAuditLines(t, r2.AuditDir, maxLine)

			if sd, ok := drv.(sessionDriver); ok {
				list, err := sd.ListSessions(ctx, a.Container())
				title := sessionTitle[name]
				if err != nil || len(list) != 1 || list[0].ID != r1.SessionID || (title == "*" && list[0].Title == "") || (title != "*" && title != "" && list[0].Title != title) {
					t.Errorf("ListSessions = %+v, %v; want %s", list, err, r1.SessionID)
				}
			}
			drivertest.NoKeyInHome(t, a, keyDirs[name]...)
		})
	}
}
