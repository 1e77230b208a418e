package pi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

// installFakePi puts an executable "pi" on the fake sandbox's PATH.
func installFakePi(t *testing.T, f *drivertest.HostOps) {
	t.Helper()
	f.Install(t, "pi", "#!/bin/sh\nexit 0\n")
}

func TestDriverBasics(t *testing.T) {
	d := New(Options{APIKey: "sk-secret-1234"})
	drivertest.CheckBasics(t, d, New(Options{}), "pi", "sk-secret-1234")
	want := sandboxagent.Capabilities{Continue: true, Fork: true, Skills: true, Rules: true, Sessions: true, Thinking: true, Usage: true, Deltas: true, Abort: sandboxagent.AbortInterrupt}
	if sandboxagent.CapabilitiesOf(d) != want {
		t.Errorf("capabilities %+v", sandboxagent.CapabilitiesOf(d))
	}
	if New(Options{Image: "x:y"}).Image() != "x:y" {
		t.Error("Options.Image ignored")
	}
}

func TestCommand(t *testing.T) {
	const id = "01a226cc-99ca-72ce-ad27-ea8c5f5a37fe"
	base := []string{"pi", "--mode", "json", "--offline"}
	gw := Options{BaseURL: "http://127.0.0.1:4000", APIKey: "sk-k"}
	offline := map[string]string{"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range offline {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		o    Options
		turn sandboxagent.Turn
		cmd  []string
		env  map[string]string
	}{
		{
			name: "gateway default model",
			o:    gw, turn: sandboxagent.Turn{Prompt: "hello"},
			cmd: cat(base, []string{"--provider", DefaultProvider, "--model", DefaultModel}),
			env: with(KeyEnv, "sk-k"),
		},
		{
			name: "turn model with provider prefix and slash",
			o:    gw, turn: sandboxagent.Turn{Prompt: "hello", Model: DefaultProvider + "/vendor/m-1"},
			cmd: cat(base, []string{"--provider", DefaultProvider, "--model", "vendor/m-1"}),
			env: with(KeyEnv, "sk-k"),
		},
		{
			name: "continue",
			o:    gw, turn: sandboxagent.Turn{Prompt: "again", SessionID: id, WorkDir: "/w"},
			cmd: cat(base, []string{"--provider", DefaultProvider, "--model", DefaultModel, "--session", id}),
			env: with(KeyEnv, "sk-k"),
		},
		{
			name: "options model, provider and thinking",
			o:    Options{BaseURL: "http://x/v1", Provider: "gw", Model: "glm-5", Thinking: "low"},
			turn: sandboxagent.Turn{Prompt: "-starts with a dash"},
			cmd:  cat(base, []string{"--provider", "gw", "--model", "glm-5", "--thinking", "low"}),
			env:  with(),
		},
		{
			name: "built-in provider",
			o:    Options{Provider: "anthropic", APIKey: "sk-ant"},
			turn: sandboxagent.Turn{Prompt: "hi", Model: "claude-sonnet-4-5"},
			cmd:  cat(base, []string{"--provider", "anthropic", "--model", "claude-sonnet-4-5"}),
			env:  with("ANTHROPIC_API_KEY", "sk-ant"),
		},
		{
			name: "built-in default provider, own key variable",
			o:    Options{APIKey: "sk-o", KeyEnv: "MY_KEY"},
			turn: sandboxagent.Turn{Prompt: "hi"},
			cmd:  cat(base, []string{"--provider", "openai", "--model", DefaultModel}),
			env:  with("MY_KEY", "sk-o"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := New(tc.o).Command(tc.turn)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(inv.Cmd, tc.cmd) {
				t.Errorf("cmd\n got %q\nwant %q", inv.Cmd, tc.cmd)
			}
			drivertest.CheckInvocation(t, inv, tc.turn, tc.env, nil, true, "sk-")
		})
	}
}

func TestCommandErrors(t *testing.T) {
	gw := Options{BaseURL: "http://127.0.0.1:4000"}
	for name, tc := range map[string]struct {
		o Options
		t sandboxagent.Turn
	}{
		"empty prompt":      {gw, sandboxagent.Turn{Prompt: " \n"}},
		"bad session":       {gw, sandboxagent.Turn{Prompt: "x", SessionID: "../etc"}},
		"unknown session":   {gw, sandboxagent.Turn{Prompt: "x", SessionID: "unknown-sandbox-agent-1"}},
		"dash model":        {gw, sandboxagent.Turn{Prompt: "x", Model: "--help"}},
		"bad provider":      {Options{BaseURL: "http://x", Provider: "a b"}, sandboxagent.Turn{Prompt: "x"}},
		"bad thinking":      {Options{BaseURL: "http://x", Thinking: "--x"}, sandboxagent.Turn{Prompt: "x"}},
		"unknown built-in":  {Options{Provider: "nowhere", APIKey: "k"}, sandboxagent.Turn{Prompt: "x"}},
		"bad key variable":  {Options{BaseURL: "http://x", KeyEnv: "A=B"}, sandboxagent.Turn{Prompt: "x"}},
		"empty model strip": {gw, sandboxagent.Turn{Prompt: "x", Model: DefaultProvider + "/"}},
	} {
		if _, err := New(tc.o).Command(tc.t); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSetupGateway(t *testing.T) {
	f := drivertest.NewHostOps(t)
	installFakePi(t, f)
	d := New(Options{BaseURL: "http://127.0.0.1:4000/v1", APIKey: "sk-secret-9876", Model: "m1", MaxRetries: -1})
	if err := d.Setup(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	models := []byte(f.Read(t, ".pi/agent/models.json"))
	settings := []byte(f.Read(t, ".pi/agent/settings.json"))
	for _, b := range [][]byte{models, settings} {
		if bytes.Contains(b, []byte("sk-secret-9876")) {
			t.Errorf("key written into a file:\n%s", b)
		}
	}
	var m struct {
		Providers map[string]struct {
			BaseURL string `json:"baseUrl"`
			API     string `json:"api"`
			APIKey  string `json:"apiKey"`
			Models  []struct {
				ID string `json:"id"`
			} `json:"models"`
		} `json:"providers"`
	}
	if err := json.Unmarshal(models, &m); err != nil {
		t.Fatal(err)
	}
	p, ok := m.Providers[DefaultProvider]
	if !ok || p.BaseURL != "http://127.0.0.1:4000/v1" || p.API != "openai-completions" || p.APIKey != KeyEnv || len(p.Models) != 1 || p.Models[0].ID != "m1" {
		t.Errorf("models.json:\n%s", models)
	}
	var s map[string]any
	if err := json.Unmarshal(settings, &s); err != nil {
		t.Fatal(err)
	}
	retry, _ := s["retry"].(map[string]any)
	if s["defaultProvider"] != DefaultProvider || s["defaultModel"] != "m1" || s["shellCommandPrefix"] != "unset "+KeyEnv ||
		s["enableInstallTelemetry"] != false || retry["enabled"] != false {
		t.Errorf("settings.json:\n%s", settings)
	}
	fi, err := os.Stat(filepath.Join(f.Home, ".pi/agent/models.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("models.json mode %v (%v)", fi.Mode(), err)
	}
}

func TestSetupBuiltinAndErrors(t *testing.T) {
	f := drivertest.NewHostOps(t)
	installFakePi(t, f)
	if err := New(Options{Provider: "anthropic", APIKey: "k"}).Setup(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.Home, ".pi/agent/models.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("models.json written for a built-in provider (%v)", err)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(f.Read(t, ".pi/agent/settings.json")), &s); err != nil {
		t.Fatal(err)
	}
	if s["shellCommandPrefix"] != "unset ANTHROPIC_API_KEY" {
		t.Errorf("settings %v", s)
	}

	// A built-in provider this package does not know, without a key (a
	// local server pi knows): no key variable to hide.
	h := drivertest.NewHostOps(t)
	installFakePi(t, h)
	if err := New(Options{Provider: "nowhere"}).Setup(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if b := h.Read(t, ".pi/agent/settings.json"); strings.Contains(b, "shellCommandPrefix") {
		t.Errorf("settings %s", b)
	}

	// pi missing from the image.
	g := drivertest.NewHostOps(t)
	if err := New(Options{BaseURL: "http://x"}).Setup(context.Background(), g); !errors.Is(err, sandboxagent.ErrCLIMissing) {
		t.Errorf("no pi: %v", err)
	}
	g.Intercept = func(sandboxagent.ExecRequest) (*sandboxagent.ExecResult, error) {
		return nil, errors.New("engine gone")
	}
	if err := New(Options{BaseURL: "http://x"}).Setup(context.Background(), g); err == nil {
		t.Error("engine failure not reported")
	}
	if err := New(Options{Provider: "nowhere", APIKey: "k"}).Setup(context.Background(), g); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("unknown provider: %v", err)
	}
}

// session writes a pi session file as pi does and returns its path.
func session(t *testing.T, f *drivertest.HostOps, id, cwd, prompt string, at time.Time) string {
	t.Helper()
	dir := filepath.Join(f.Home, ".pi/agent/sessions", projectDir(cwd))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, fileName(at, id))
	lines := []string{
		`{"type":"session","version":3,"id":"` + id + `","timestamp":"` + at.UTC().Format("2006-01-02T15:04:05.000Z") + `","cwd":"` + cwd + `"}`,
		`{"type":"model_change","id":"5afc37f6","parentId":null,"timestamp":"2026-11-29T10:14:32.847Z","provider":"sandbox","modelId":"fake-model"}`,
		`{"type":"message","id":"28daeb6e","parentId":"5afc37f6","timestamp":"2026-11-29T10:14:33.462Z","message":{"role":"user","content":[{"type":"text","text":"` + prompt + `"}],"timestamp":1795947273456}}`,
		`{"type":"message","id":"78e05bf1","parentId":"28daeb6e","timestamp":"2026-11-29T10:14:34.351Z","message":{"role":"assistant","content":[{"type":"text","text":"DONE"}],"stopReason":"stop"}}`,
	}
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, at, at); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSessionHelpers(t *testing.T) {
	if got := projectDir("/workspace"); got != "--workspace--" {
		t.Errorf("projectDir %q", got)
	}
	if got := projectDir("/repo/sub"); got != "--repo-sub--" {
		t.Errorf("projectDir %q", got)
	}
	at := time.Date(2026, 11, 29, 8, 59, 0, 860e6, time.UTC)
	if got := fileName(at, "x"); got != "2026-11-29T08-59-00-860Z_x.jsonl" {
		t.Errorf("fileName %q", got)
	}
	id, err := newID(at)
	ms := fmt.Sprintf("%012x", at.UnixMilli())
	if err != nil || !validID(id) || id[14] != '7' || !strings.HasPrefix(strings.ReplaceAll(id, "-", ""), ms) || !strings.ContainsAny(id[19:20], "89ab") {
		t.Errorf("newID %q %v", id, err)
	}
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	f := drivertest.NewHostOps(t)
	d := New(Options{BaseURL: "http://x"})
	const a = "01a226cc-99ca-72ce-ad27-ea8c5f5a37fe"
	const b = "01a226cd-0000-7000-8000-000000000001"
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	pa := session(t, f, a, f.Work, `first prompt ALPHA\nsecond line`, t0)
	session(t, f, b, "/elsewhere", "other", t0.Add(time.Minute))

	list, err := d.ListSessions(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != b || list[1].ID != a || list[1].Title != "first prompt ALPHA" || list[1].Path != pa || list[1].Updated == "" {
		t.Fatalf("list %+v", list)
	}

	// Fork: a new file beside the original, same entries, new header.
	orig, _ := os.ReadFile(pa)
	fid, err := d.Fork(ctx, f, a)
	if err != nil {
		t.Fatal(err)
	}
	if !validID(fid) || fid == a {
		t.Fatalf("fork id %q", fid)
	}
	if now, _ := os.ReadFile(pa); !bytes.Equal(now, orig) {
		t.Error("fork changed the original")
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(pa), "*_"+fid+".jsonl"))
	if len(matches) != 1 {
		t.Fatalf("fork file: %v", matches)
	}
	forked, _ := os.ReadFile(matches[0])
	h, rest, err := splitHeader(forked)
	if err != nil {
		t.Fatal(err)
	}
	_, origRest, _ := bytes.Cut(orig, []byte("\n"))
	if h.str("id") != fid || h.str("parentSession") != pa || h.str("cwd") != f.Work || !bytes.Equal(rest, origRest) {
		t.Errorf("fork file:\n%s", forked)
	}
	if !strings.HasPrefix(string(forked), `{"type":"session","version":3,"id":"`+fid+`"`) {
		t.Errorf("fork header order: %s", forked[:80])
	}

	// Dump, delete, load back.
	dump, err := d.DumpSession(ctx, f, a)
	if err != nil {
		t.Fatal(err)
	}
	if dump.Driver != "pi" || dump.SessionID != a || !bytes.Equal(dump.Files[dumpSession], orig) || dump.Meta[metaCwd] != f.Work || dump.Meta[metaFile] != filepath.Base(pa) {
		t.Errorf("dump %+v", dump.Meta)
	}
	if _, err := d.LoadSession(ctx, f, dump); !errors.Is(err, sandboxagent.ErrDestinationExists) {
		t.Errorf("load over an existing session: %v", err)
	}
	if err := d.DeleteSession(ctx, f, a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pa); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("deleted session still there (%v)", err)
	}
	drivertest.CheckSessionGone(t, d, f, a)

	// Load into "another container" whose working directory differs: the
	// file goes to that directory's folder with its cwd rewritten.
	g := drivertest.NewHostOps(t)
	g.Work = filepath.Join(filepath.Dir(g.Work), "other-dir")
	if err := os.MkdirAll(g.Work, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := d.LoadSession(ctx, g, dump)
	if err != nil || got != a {
		t.Fatalf("load: %q %v", got, err)
	}
	loaded, err := os.ReadFile(filepath.Join(g.Home, ".pi/agent/sessions", projectDir(g.Work), filepath.Base(pa)))
	if err != nil {
		t.Fatal(err)
	}
	lh, lrest, err := splitHeader(loaded)
	if err != nil {
		t.Fatal(err)
	}
	if lh.str("id") != a || lh.str("cwd") != g.Work || !bytes.Equal(lrest, origRest) {
		t.Errorf("loaded:\n%s", loaded)
	}
	if l2, _ := d.ListSessions(ctx, g); len(l2) != 1 || l2[0].ID != a {
		t.Errorf("list after load %+v", l2)
	}
}

func TestSessionErrors(t *testing.T) {
	ctx := context.Background()
	f := drivertest.NewHostOps(t)
	d := New(Options{BaseURL: "http://x"})
	for _, id := range []string{"", "x", "../../etc/passwd", `01a226cc-99ca-72ce-ad27-ea8c5f5a37f"`} {
		if _, err := d.Fork(ctx, f, id); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("fork %q: %v", id, err)
		}
		if err := d.DeleteSession(ctx, f, id); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("delete %q: %v", id, err)
		}
		if _, err := d.DumpSession(ctx, f, id); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("dump %q: %v", id, err)
		}
	}
	if l, err := d.ListSessions(ctx, f); err != nil || len(l) != 0 {
		t.Errorf("empty list: %v %v", l, err)
	}
	const id = "01a226cc-99ca-72ce-ad27-ea8c5f5a37fe"
	good := []byte(`{"type":"session","version":3,"id":"` + id + `","cwd":"/w"}` + "\n")
	for name, dump := range map[string]sandboxagent.SessionDump{
		"other driver": {Driver: "claude", SessionID: id, Files: map[string][]byte{dumpSession: good}},
		"no file":      {Driver: "pi", SessionID: id},
		"bad id":       {Driver: "pi", SessionID: "nope", Files: map[string][]byte{dumpSession: good}},
		"id mismatch":  {Driver: "pi", SessionID: "01a226cc-99ca-72ce-ad27-000000000000", Files: map[string][]byte{dumpSession: good}},
	} {
		if _, err := d.LoadSession(ctx, f, dump); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("load %s: %v", name, err)
		}
	}
	if _, err := d.LoadSession(ctx, f, sandboxagent.SessionDump{Driver: "pi", SessionID: id, Files: map[string][]byte{dumpSession: []byte("garbage\n")}}); err == nil {
		t.Error("load of a file without header")
	}
	// A file name from the dump that tries to leave the folder is replaced.
	dump := sandboxagent.SessionDump{Driver: "pi", SessionID: id, Files: map[string][]byte{dumpSession: good}, Meta: map[string]string{metaFile: "../../x_" + id + ".jsonl"}}
	if _, err := d.LoadSession(ctx, f, dump); err != nil {
		t.Fatal(err)
	}
	m, _ := filepath.Glob(filepath.Join(f.Home, ".pi/agent/sessions", projectDir(f.Work), "*_"+id+".jsonl"))
	if len(m) != 1 {
		t.Errorf("loaded files %v", m)
	}
}

func TestRulesAndSkills(t *testing.T) {
	ctx := context.Background()
	f := drivertest.NewHostOps(t)
	d := New(Options{BaseURL: "http://x"})
	drivertest.CheckRulesAndSkills(t, d, f, ".pi/agent/AGENTS.md", ".pi/agent/skills")
	// pi reads SKILL.md's front matter: CRLF lines and a folded value
	// pass; none, or one without a description, does not.
	crlf := sandboxagent.Skill{Name: "marker", Files: map[string][]byte{"SKILL.md": []byte("---\r\nname: marker\r\ndescription: >\r\n  v2\r\n---\r\n")}}
	if err := d.InstallSkill(ctx, f, crlf); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []sandboxagent.Skill{
		{Name: "x", Files: map[string][]byte{"SKILL.md": []byte("# no front matter\ndescription: x\n")}},
		{Name: "x", Files: map[string][]byte{"SKILL.md": []byte("---\nname: x\n---\ndescription: x\n")}},
	} {
		if err := d.InstallSkill(ctx, f, bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("skill %q: %v", bad.Files["SKILL.md"], err)
		}
	}
}
