package sandboxagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// floodRuntime's CLI names its session, then prints line until the turn
// stops it (its context ends): a sandbox that floods the host.
func floodRuntime(line string) *fakeRuntime {
	f := &fakeRuntime{}
	f.exec = func(ctx context.Context, req RuntimeExec) (int, error) {
		if req.Cmd[0] == "sh" && strings.Contains(req.Cmd[2], "id -u") {
			io.WriteString(req.Stdout, "1000\n1000\n")
			return 0, nil
		}
		if req.Cmd[0] != "fakecli" {
			return 0, nil
		}
		io.WriteString(req.Stdout, `{"session":"flood"}`+"\n")
		for i := 0; ctx.Err() == nil; i++ {
			if i > 10_000_000 {
				return 0, errors.New("the flood was never stopped")
			}
			io.WriteString(req.Stdout, line)
		}
		return -1, ctx.Err()
	}
	return f
}

// Each bound ends a flooding turn with ErrOutputLimit, keeps what the
// turn holds and writes under the bound, and records what was dropped.
func TestTurnOutputLimits(t *testing.T) {
	cases := []struct {
		name, line string
		set        func(*Limits)
		want       string
	}{
		{"lines", "x\n", func(l *Limits) { l.TurnLines = 1000 }, "max_turn_lines"},
		{"events", `{"text":"t"}` + "\n", func(l *Limits) { l.TurnEvents = 500 }, "max_turn_events"},
		{"event bytes", `{"text":"` + strings.Repeat("y", 1000) + `"}` + "\n", func(l *Limits) { l.TurnEventBytes = 200 << 10 }, "max_turn_event_bytes"},
		{"audit turn", strings.Repeat("z", 1000) + "\n", func(l *Limits) { l.AuditTurnBytes = 300 << 10 }, "max_audit_turn_bytes"},
		{"audit session", strings.Repeat("z", 1000) + "\n", func(l *Limits) { l.AuditSessionBytes = 300 << 10 }, "max_audit_session_bytes"},
		{"audit day", strings.Repeat("z", 1000) + "\n", func(l *Limits) { l.AuditDayBytes = 300 << 10 }, "max_audit_day_bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, root := startFake(t, floodRuntime(c.line), &fakeDriver{key: "k-123456"}, func(cfg *Config) { c.set(&cfg.Limits) })
			res, err := a.Stream(context.Background(), "p", nil)
			if !errors.Is(err, ErrOutputLimit) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrOutputLimit naming %s", err, c.want)
			}
			lim := a.cfg.Limits
			if len(res.Events) > lim.TurnEvents+maxQueuedDenials+3 {
				t.Errorf("%d events kept", len(res.Events))
			}
			var limitEv *Event
			for i, e := range res.Events {
				if e.Kind == KindOutputLimit {
					limitEv = &res.Events[i]
				}
			}
			if limitEv == nil || !strings.Contains(limitEv.Payload.Text, "dropped") {
				t.Fatalf("no output_limit event saying what was dropped: %+v", limitEv)
			}
			var audit int64
			filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					fi, _ := d.Info()
					audit += fi.Size()
				}
				return nil
			})
			if audit > 2*min(lim.AuditTurnBytes, lim.AuditSessionBytes, lim.AuditDayBytes)+64<<10 && c.want[:9] == "max_audit" {
				t.Errorf("audit holds %d bytes", audit)
			}
			ev, err := os.ReadFile(filepath.Join(res.AuditDir, "events.jsonl"))
			if err != nil || !strings.Contains(string(ev), `"kind":"output_limit"`) {
				t.Errorf("events.jsonl has no output_limit record (%v)", err)
			}
		})
	}
}

// A turn under every bound is untouched by them.
func TestTurnOutputLimitsNotHit(t *testing.T) {
	out := func(string) (string, string, int) {
		var b strings.Builder
		b.WriteString(`{"session":"s"}` + "\n")
		for i := range 100 {
			fmt.Fprintf(&b, `{"text":"t%d"}`+"\n", i)
		}
		return b.String(), "", 0
	}
	a, _ := startFake(t, cliRuntime(out), &fakeDriver{key: "k-123456"}, func(c *Config) { c.Limits.TurnLines = 101; c.Limits.TurnEvents = 102 })
	res, err := a.Stream(context.Background(), "p", nil)
	if err != nil || res.Reply != "t99" {
		t.Fatalf("%q %v", res.Reply, err)
	}
}

// A Config built by hand (not from DefaultConfig) still has every bound:
// none of them has an "unlimited" zero.
func TestLimitsDefaultWhenUnset(t *testing.T) {
	got := Config{}.withDefaults().Limits
	if want := DefaultConfig().Limits; got != want {
		t.Errorf("limits %+v, want %+v", got, want)
	}
	c := Config{Limits: Limits{TurnLines: 7}}.withDefaults()
	if c.Limits.TurnLines != 7 || c.Limits.AuditDayBytes != DefaultConfig().Limits.AuditDayBytes {
		t.Errorf("limits %+v", c.Limits)
	}
}
