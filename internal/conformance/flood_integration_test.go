//go:build integration

package conformance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// floods are what a tool writes straight into the CLI's stdout pipe (see
// execRoots): as fast as the pipe takes it (yes | head, no shell loop),
// lines no parser understands (each would be a raw event).
var floods = map[string]string{
	// 1,000,000 lines of 10 bytes.
	"lines": `yes 123456789 | head -n 1000000`,
	// 300 MB in lines of 1 KiB.
	"bytes": `yes "$(head -c 1023 /dev/zero | tr '\0' x)" | head -c 300000000`,
}

const (
	floodChildEnv = "SANDBOX_AGENT_TEST_FLOOD_CHILD" // the child's floodSpec (JSON)
	floodReportAt = "SANDBOX-AGENT-FLOOD-REPORT "    // starts the child's report line
	afterFlood    = "AFTER-FLOOD"                    // the positive control's reply

	// floodMaxRSS bounds the host process's peak resident memory (VmHWM)
	// over a flood turn and the turn after it.
	floodMaxRSS = 256 << 20
	// floodMaxAudit bounds the audit a flood turn leaves:
	// max_audit_turn_bytes (the default 64 MiB) and a margin for the
	// records written past it (status.json, the output_limit and done
	// events, model.jsonl, the next turn).
	floodMaxAudit = 64<<20 + 1<<20
)

// floodSpec is what the parent asks the child for.
type floodSpec struct {
	Driver    string `json:"driver"`
	Flood     string `json:"flood"`
	AuditRoot string `json:"audit_root"`
}

// floodReport is what the child measured.
type floodReport struct {
	Err          string   `json:"err"`
	OutputLimit  bool     `json:"output_limit"` // errors.Is(err, ErrOutputLimit)
	LimitEvents  []string `json:"limit_events"` // payload.text of output_limit events
	Events       int      `json:"events"`
	AuditDir     string   `json:"audit_dir"`
	Seconds      float64  `json:"seconds"`
	NextReply    string   `json:"next_reply"`
	NextErr      string   `json:"next_err"`
	BaseHWMBytes int64    `json:"base_hwm_bytes"` // VmHWM once the agent had started
	HWMBytes     int64    `json:"hwm_bytes"`      // VmHWM after both turns
}

// TestConformanceFlood: a tool that writes into the CLI's stdout pipe
// (the same trick as TestConformanceForgery's) (a) a million short lines,
// (b) 300 MB of 1 KiB lines. The turn must end with ErrOutputLimit and an
// output_limit event, its audit must stay within max_audit_turn_bytes (and
// a small margin), the host process's peak RSS within 256 MiB, and the
// session must survive: the next turn on the same agent works. The turns
// run in a child process (this test binary, TestConformanceFloodChild), so
// the peak RSS measured is theirs alone.
func TestConformanceFlood(t *testing.T) {
	testenv.Runtime(t)
	// The child is this package's test binary built without -race: the
	// race detector multiplies a process's memory several times, and the
	// bound is for the memory a production build uses.
	child := filepath.Join(t.TempDir(), "flood-child")
	build := exec.Command("go", "test", "-c", "-tags", "integration", "-o", child, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the child: %v\n%s", err, out)
	}
	for _, name := range []string{"claude", "codex", "pi"} {
		for _, flood := range []string{"lines", "bytes"} {
			t.Run(name+"/"+flood, func(t *testing.T) {
				spec := floodSpec{Driver: name, Flood: flood, AuditRoot: drivertest.AuditRoot(t)}
				rep := runFloodChild(t, child, spec)
				t.Logf("%s %s: %v after %.1fs, %d events; output_limit: %q", name, flood, rep.Err, rep.Seconds, rep.Events, rep.LimitEvents)
				if !rep.OutputLimit {
					t.Errorf("the flood turn's error %q does not wrap ErrOutputLimit", rep.Err)
				}
				if len(rep.LimitEvents) == 0 {
					t.Error("no output_limit event")
				}
				if rep.AuditDir == "" {
					t.Fatal("the flood turn has no audit folder")
				}
				turn, day := dirSize(t, rep.AuditDir), dirSize(t, filepath.Dir(rep.AuditDir))
				t.Logf("%s %s: audit folder %d bytes (%.1f MiB), date folder %d bytes (%.1f MiB)", name, flood, turn, mib(turn), day, mib(day))
				if turn > floodMaxAudit || day > floodMaxAudit {
					t.Errorf("audit: the session folder holds %d bytes, the date folder %d; want <= %d", turn, day, floodMaxAudit)
				}
				t.Logf("%s %s: host peak RSS (VmHWM) %.1f MiB (%.1f MiB once the agent had started)", name, flood, mib(rep.HWMBytes), mib(rep.BaseHWMBytes))
				if rep.HWMBytes <= 0 || rep.HWMBytes > floodMaxRSS {
					t.Errorf("host peak RSS %d bytes, want <= %d", rep.HWMBytes, floodMaxRSS)
				}
				if rep.NextErr != "" || rep.NextReply != afterFlood {
					t.Errorf("the turn after the flood: reply %q, err %s; want %q (the session must survive)", rep.NextReply, rep.NextErr, afterFlood)
				}
			})
		}
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// runFloodChild runs TestConformanceFloodChild in the child binary for
// spec and returns its report.
func runFloodChild(t *testing.T, child string, spec floodSpec) floodReport {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, child, "-test.run=^TestConformanceFloodChild$", "-test.v", "-test.count=1", "-test.timeout=11m")
	cmd.Env = append(os.Environ(), floodChildEnv+"="+string(b))
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(l), floodReportAt); ok {
			var rep floodReport
			if jerr := json.Unmarshal([]byte(r), &rep); jerr != nil {
				t.Fatalf("the child's report %q: %v", r, jerr)
			}
			if err != nil {
				t.Errorf("the child failed (%v):\n%s", err, out)
			}
			return rep
		}
	}
	t.Fatalf("the child printed no report (%v):\n%s", err, out)
	return floodReport{}
}

// TestConformanceFloodChild is TestConformanceFlood's child: it runs only
// when that test starts this binary with SANDBOX_AGENT_TEST_FLOOD_CHILD.
// It starts the agent, runs the flood turn and the turn after it, and
// prints its report with its VmHWM.
func TestConformanceFloodChild(t *testing.T) {
	env := os.Getenv(floodChildEnv)
	if env == "" {
		t.Skip("the child process of TestConformanceFlood")
	}
	var spec floodSpec
	if err := json.Unmarshal([]byte(env), &spec); err != nil {
		t.Fatal(err)
	}
	flood, ok := floods[spec.Flood]
	if !ok {
		t.Fatalf("unknown flood %q", spec.Flood)
	}
	// The model asks for the flood; afterwards it answers afterFlood,
	// whether the flood turn's CLI asked again or the next turn is the
	// first to (once the script is over the fake answers DONE).
	srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: execRoots(flood+` > "$d/fd/1" 2>/dev/null`) + `; echo flooded`},
		{Text: afterFlood},
		{Text: afterFlood},
	}})
	drv := drivers.All()[spec.Driver](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
	cfg := testenv.Config()
	cfg.AuditRoot = spec.AuditRoot
	cfg.Timeouts.Ask = 4 * time.Minute
	cfg.PerTurn = false // the default mode (long-lived for claude and pi)
	if cfg.Limits != sandboxagent.DefaultConfig().Limits {
		t.Fatalf("limits %+v, want the defaults", cfg.Limits)
	}
	a := testenv.StartAgent(t, drv, cfg.AuditRoot, sandboxagent.WithConfig(cfg))
	var rep floodReport
	rep.BaseHWMBytes = vmHWM(t)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := a.Stream(ctx, "Run the command.", nil)
	rep.Seconds = time.Since(start).Seconds()
	if err != nil {
		rep.Err = err.Error()
	}
	rep.OutputLimit = errors.Is(err, sandboxagent.ErrOutputLimit)
	rep.Events = len(res.Events)
	rep.AuditDir = res.AuditDir
	for _, ev := range res.Events {
		if ev.Kind == sandboxagent.KindOutputLimit {
			rep.LimitEvents = append(rep.LimitEvents, ev.Payload.Text)
		}
	}

	reply, err := a.Ask(ctx, "Now answer.")
	rep.NextReply = reply
	if err != nil {
		rep.NextErr = err.Error()
	}
	rep.HWMBytes = vmHWM(t)
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(floodReportAt + string(b))
}

// vmHWM is this process's peak resident set size (/proc/self/status).
func vmHWM(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// dirSize is the bytes of the regular files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
