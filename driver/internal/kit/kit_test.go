package kit

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

// mode is the permission bits of rel under h's home.
func mode(t *testing.T, h *drivertest.HostOps, rel string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(h.HomePath(rel))
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestShellRun(t *testing.T) {
	ctx := context.Background()
	h := drivertest.NewHostOps(t)
	sh := Shell{Driver: "x", Dir: "$HOME/.x", Env: map[string]string{"V": "v"}}
	out, code, err := sh.Run(ctx, h, []byte("in"), `printf '%s %s %s ' "$H" "$V" "$1"; cat`, "arg")
	if err != nil || code != 0 || string(out) != h.Home+"/.x v arg in" {
		t.Errorf("Run: %q %d %v", out, code, err)
	}
	for _, c := range []int{ExitNoSession, ExitExists} {
		if _, code, err := sh.Run(ctx, h, nil, `exit "$1"`, strconv.Itoa(c)); err != nil || code != c {
			t.Errorf("exit %d: %d %v", c, code, err)
		}
	}
	_, code, err = sh.Run(ctx, h, nil, `echo "  boom" >&2; echo more >&2; exit 1`)
	if err == nil || code != 1 || !strings.HasPrefix(err.Error(), "x: ") || !strings.Contains(err.Error(), "boom") || strings.Contains(err.Error(), "more") {
		t.Errorf("failure: %d %v", code, err)
	}
	if res, err := sh.Exec(ctx, h, nil, `exit 7`); err != nil || res.ExitCode != 7 {
		t.Errorf("Exec: %+v %v", res, err)
	}
	if err := (Shell{Driver: "x"}).Require(ctx, h, "sh"); err != nil {
		t.Errorf("Require sh: %v", err)
	}
	if err := (Shell{Driver: "x"}).Require(ctx, h, "no-such-cli-here"); !errors.Is(err, sandboxagent.ErrCLIMissing) {
		t.Errorf("Require missing: %v", err)
	}
}

func TestShellTimeout(t *testing.T) {
	ctx := context.Background()
	if _, _, err := (Shell{Driver: "x"}).Run(ctx, timedOut(t), nil, "true"); !errors.Is(err, sandboxagent.ErrTimeout) {
		t.Errorf("timeout: %v", err)
	}
}

func TestShellWriteFileAndRemove(t *testing.T) {
	ctx := context.Background()
	h := drivertest.NewHostOps(t)
	sh := Shell{Driver: "x", Dir: "$HOME/.x", DirUmask: "077"}
	if err := sh.WriteFile(ctx, h, "a/b/f.json", []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if h.Read(t, ".x/a/b/f.json") != "{}" || mode(t, h, ".x/a/b/f.json") != 0o600 || mode(t, h, ".x/a/b") != 0o700 {
		t.Errorf("file %o dir %o", mode(t, h, ".x/a/b/f.json"), mode(t, h, ".x/a/b"))
	}
	if err := sh.WriteFile(ctx, h, "a/b/f.json", nil, 0o644); err != nil || h.Read(t, ".x/a/b/f.json") != "" {
		t.Errorf("rewrite: %v", err)
	}
	home := Shell{Driver: "x"}
	if err := home.WriteFile(ctx, h, "top.txt", []byte("t"), 0o644); err != nil || h.Read(t, "top.txt") != "t" {
		t.Errorf("home: %v", err)
	}
	for _, bad := range []string{"", ".", "../x", "/abs", "a/../../b"} {
		if err := sh.WriteFile(ctx, h, bad, nil, 0o644); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("WriteFile(%q): %v", bad, err)
		}
		if err := sh.Remove(ctx, h, bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("Remove(%q): %v", bad, err)
		}
	}
	if err := sh.Remove(ctx, h, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.Home, ".x/a")); !os.IsNotExist(err) {
		t.Errorf("not removed: %v", err)
	}
	if err := sh.Remove(ctx, h, "a"); err != nil {
		t.Errorf("removing a missing path: %v", err)
	}
}

func TestInstallSkillAndRules(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		files func(h *drivertest.HostOps) Files
		root  string
	}{
		{"shell", func(*drivertest.HostOps) Files { return Shell{Driver: "x", Dir: "$HOME/.x"} }, ".x"},
		{"ops", func(h *drivertest.HostOps) Files { return OpsDir{Driver: "x", Root: h.Home + "/cfg"} }, "cfg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := drivertest.NewHostOps(t)
			f := tc.files(h)
			s := sandboxagent.Skill{Name: "demo", Files: map[string][]byte{
				"SKILL.md": []byte("---\nname: demo\n---\n"), "scripts/run.sh": []byte("#!/bin/sh\necho hi\n"), "old.md": []byte("old"),
			}}
			if err := InstallSkill(ctx, h, f, "skills", s, ExecScripts); err != nil {
				t.Fatal(err)
			}
			if h.Read(t, tc.root+"/skills/demo/SKILL.md") != "---\nname: demo\n---\n" || mode(t, h, tc.root+"/skills/demo/scripts/run.sh") != 0o755 || mode(t, h, tc.root+"/skills/demo/SKILL.md") != 0o644 {
				t.Error("skill files")
			}
			delete(s.Files, "old.md")
			if err := InstallSkill(ctx, h, f, "skills", s, PlainFiles); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(h.Home, tc.root, "skills/demo/old.md")); !os.IsNotExist(err) {
				t.Errorf("old file kept: %v", err)
			}
			if mode(t, h, tc.root+"/skills/demo/scripts/run.sh") != 0o644 {
				t.Error("PlainFiles made a script executable")
			}
			for _, bad := range []sandboxagent.Skill{
				{Name: "../x", Files: map[string][]byte{"SKILL.md": nil}},
				{Name: "a/b", Files: map[string][]byte{"SKILL.md": nil}},
				{Name: "x", Files: map[string][]byte{"SKILL.md": nil, "../y": nil}},
			} {
				if err := InstallSkill(ctx, h, f, "skills", bad, PlainFiles); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
					t.Errorf("%+v: %v", bad, err)
				}
			}

			if err := InstallRules(ctx, h, f, "AGENTS.md", "be brief\n"); err != nil || h.Read(t, tc.root+"/AGENTS.md") != "be brief\n" {
				t.Errorf("rules: %v", err)
			}
			if err := InstallRules(ctx, h, f, "AGENTS.md", ""); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(h.Home, tc.root, "AGENTS.md")); !os.IsNotExist(err) {
				t.Errorf("empty rules kept the file: %v", err)
			}
		})
	}
}

func TestIDs(t *testing.T) {
	for _, ok := range []string{"2750e6ed-d28c-42fa-818e-4ce8c0fc7b97", "2750E6ED-D28C-42FA-818E-4CE8C0FC7B97"} {
		if !IsUUID(ok) {
			t.Errorf("IsUUID(%q)", ok)
		}
	}
	for _, bad := range []string{"", "2750e6ed-d28c-42fa-818e-4ce8c0fc7b9", "2750e6ed-d28c-42fa-818e-4ce8c0fc7b97x", "2750e6ed_d28c-42fa-818e-4ce8c0fc7b97", "2750e6ed-d28c-42fa-818e-4ce8c0fc7b9g", "../../../../../../../../etc/passwd"} {
		if IsUUID(bad) {
			t.Errorf("IsUUID(%q)", bad)
		}
	}
	id, err := NewUUID()
	if err != nil || !IsUUID(id) || id[14] != '4' || strings.ToLower(id) != id {
		t.Errorf("NewUUID %q %v", id, err)
	}
	if id2, _ := NewUUID(); id2 == id {
		t.Error("NewUUID repeats")
	}
	ids := SessionIDs{Driver: "x", Form: "a UUID", Valid: IsUUID}
	if err := ids.Check(id); err != nil {
		t.Error(err)
	}
	if err := ids.Check("-rf"); !errors.Is(err, sandboxagent.ErrInvalidArgument) || !strings.Contains(err.Error(), `x session id "-rf" is not a UUID`) {
		t.Errorf("Check: %v", err)
	}
	if err := ids.NotFound(id); !errors.Is(err, sandboxagent.ErrPathNotFound) || !strings.HasPrefix(err.Error(), "x: ") {
		t.Errorf("NotFound: %v", err)
	}
	if err := ids.Exists("fork", id); !errors.Is(err, sandboxagent.ErrDestinationExists) || !strings.HasPrefix(err.Error(), "x: fork: ") {
		t.Errorf("Exists: %v", err)
	}
	h := drivertest.NewHostOps(t)
	sh := Shell{Driver: "x"}
	if out, code, err := ids.Run(context.Background(), h, sh, `printf '%s %s' "$1" "$2"`, id, "more"); err != nil || code != 0 || string(out) != id+" more" {
		t.Errorf("Run: %q %d %v", out, code, err)
	}
	if _, _, err := ids.Run(context.Background(), h, sh, `exit 3`, id); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Errorf("Run exit 3: %v", err)
	}
	if _, code, err := ids.Run(context.Background(), h, sh, `exit 4`, id); err != nil || code != ExitExists {
		t.Errorf("Run exit 4: %d %v", code, err)
	}
	if _, _, err := ids.Run(context.Background(), h, sh, `touch ran`, "../x"); !errors.Is(err, sandboxagent.ErrInvalidArgument) || len(h.Runs()) != 3 {
		t.Errorf("Run with a bad id: %v (%d commands)", err, len(h.Runs()))
	}
	if nid, err := ids.Copy(context.Background(), h, sh, `[ "$1" != "$2" ]`, id, "new"); err != nil || nid != "new" {
		t.Errorf("Copy: %q %v", nid, err)
	}
	if _, err := ids.Copy(context.Background(), h, sh, `exit 4`, id, "new"); !errors.Is(err, sandboxagent.ErrDestinationExists) || !strings.Contains(err.Error(), "x: fork: session new") {
		t.Errorf("Copy exists: %v", err)
	}
	if _, err := ids.Copy(context.Background(), h, sh, `exit 3`, id, "new"); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Errorf("Copy missing: %v", err)
	}
	if err := ids.CheckAbsent(context.Background(), h, sh, `[ "$1" = "`+id+`" ] || exit 3`, id); !errors.Is(err, sandboxagent.ErrDestinationExists) || !strings.Contains(err.Error(), "x: load: ") {
		t.Errorf("CheckAbsent present: %v", err)
	}
	if err := ids.CheckAbsent(context.Background(), h, sh, `exit 3`, id); err != nil {
		t.Errorf("CheckAbsent absent: %v", err)
	}
	for _, d := range []string{"", "x"} {
		if err := ids.CheckDump(sandboxagent.SessionDump{Driver: d, SessionID: id}); err != nil {
			t.Errorf("CheckDump(%q): %v", d, err)
		}
	}
	for _, d := range []sandboxagent.SessionDump{{Driver: "y", SessionID: id}, {Driver: "x"}, {SessionID: "../x"}} {
		if err := ids.CheckDump(d); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("CheckDump(%+v): %v", d, err)
		}
	}
	dump := sandboxagent.SessionDump{Files: map[string][]byte{"a.jsonl": []byte("A")}}
	if b, err := ids.DumpFile(dump, "a.jsonl"); err != nil || string(b) != "A" {
		t.Errorf("DumpFile: %q %v", b, err)
	}
	if _, err := ids.DumpFile(dump, "b.jsonl"); !errors.Is(err, sandboxagent.ErrInvalidArgument) || !strings.Contains(err.Error(), "x session dump has no b.jsonl") {
		t.Errorf("DumpFile missing: %v", err)
	}
}

func TestParseList(t *testing.T) {
	out := "1795946453.5\t/s/a.jsonl\tTITLE A\n" +
		"1795946454\t/s/b.jsonl\t\n" +
		"bad line\n" +
		"1\t/s/skip.jsonl\tx\n" +
		"notatime\t/s/c.jsonl\tC\n"
	id := func(p string) string {
		if strings.Contains(p, "skip") {
			return ""
		}
		return strings.TrimSuffix(filepath.Base(p), ".jsonl")
	}
	got := ParseList([]byte(out), id, func(r []byte) string { return strings.ToLower(string(r)) })
	if len(got) != 3 || got[0].ID != "b" || got[1].ID != "a" || got[2].ID != "c" {
		t.Fatalf("order %+v", got)
	}
	if got[1].Title != "title a" || got[0].Title != "" || got[1].Path != "/s/a.jsonl" || got[2].Updated != "" {
		t.Errorf("fields %+v", got)
	}
	if got[0].Updated != time.Unix(1795946454, 0).UTC().Format(time.RFC3339) {
		t.Errorf("updated %q", got[0].Updated)
	}
	if ParseList(nil, id, nil) == nil || len(ParseList(nil, id, nil)) != 0 {
		t.Error("empty list")
	}
}

func TestTextHelpers(t *testing.T) {
	if got := Title(strings.Repeat("é", 81), 80); len([]rune(got)) != 80 || !strings.HasSuffix(got, "…") {
		t.Errorf("Title cut %q", got)
	}
	if got := Title("short", 80); got != "short" {
		t.Errorf("Title %q", got)
	}
	if got := Title(strings.Repeat("a", 500), 0); len(got) != 500 {
		t.Error("Title 0 cut")
	}
	if got := Fold("  a\n\tb  c "); got != "a b c" {
		t.Errorf("Fold %q", got)
	}
	if got := FirstLine("\n  \n first \nsecond"); got != "first" {
		t.Errorf("FirstLine %q", got)
	}
	if Secrets("") != nil || len(Secrets("k")) != 1 {
		t.Error("Secrets")
	}
	if tm, ok := ParseTime("1795946453.25"); !ok || tm.UnixMilli() != 1795946453250 {
		t.Errorf("ParseTime %v %v", tm, ok)
	}
	if _, ok := ParseTime("x"); ok {
		t.Error("ParseTime x")
	}
}

func TestParseHelpers(t *testing.T) {
	if ev := Raw([]byte("plain")); len(ev) != 1 || ev[0].Kind != sandboxagent.KindRaw || ev[0].Payload.Raw != "plain" {
		t.Errorf("Raw %+v", ev)
	}
	if !Blank([]byte(" \t\r")) || !Blank(nil) || Blank([]byte(" x ")) {
		t.Error("Blank")
	}
	var v struct {
		Type string `json:"type"`
	}
	if !Decode([]byte(` {"type":"a"} `), &v) || v.Type != "a" {
		t.Errorf("Decode object: %+v", v)
	}
	for _, bad := range []string{"", "plain text", `"str"`, `[1]`, `null`, `{"type":`} {
		if Decode([]byte(bad), &v) {
			t.Errorf("Decode(%q)", bad)
		}
	}
	for _, tc := range []struct {
		line   string
		ok     bool
		events int
	}{
		{"  ", false, 0}, {"plain", false, 1}, {`{"other":1}`, false, 1}, {`{"type":"b"}`, true, 0},
	} {
		v.Type = ""
		evs, ok := Line([]byte(tc.line), &v, &v.Type)
		if ok != tc.ok || len(evs) != tc.events || (ok && v.Type != "b") {
			t.Errorf("Line(%q) = %v %v (type %q)", tc.line, evs, ok, v.Type)
		}
	}
}

func TestToolArgs(t *testing.T) {
	a := ParseToolArgs([]byte(`{"command":"ls","path":"","filePath":"/f","n":3}`))
	if a.Str("command") != "ls" || a.Str("n") != "" || a.Str("missing") != "" {
		t.Errorf("Str %v", a)
	}
	if got := a.First("path", "file_path", "filePath"); got != "/f" {
		t.Errorf("First %q", got)
	}
	for _, bad := range []string{"", "not json", `["a"]`, `"s"`} {
		if a := ParseToolArgs([]byte(bad)); a.Str("command") != "" || a.First("path") != "" {
			t.Errorf("ParseToolArgs(%q) = %v", bad, a)
		}
	}
}

func TestOptions(t *testing.T) {
	for _, c := range [][3]int{{0, 2, 2}, {-1, 2, 0}, {5, 2, 5}} {
		if got := Retries(c[0], c[1]); got != c[2] {
			t.Errorf("Retries(%d, %d) = %d", c[0], c[1], got)
		}
	}
	if b, err := JSONFile(map[string]int{"a": 1}); err != nil || string(b) != "{\n  \"a\": 1\n}\n" {
		t.Errorf("JSONFile %q %v", b, err)
	}
}

// timedOut is a sandbox whose every command runs past its timeout.
func timedOut(t *testing.T) *drivertest.HostOps {
	h := drivertest.NewHostOps(t)
	h.Intercept = func(sandboxagent.ExecRequest) (*sandboxagent.ExecResult, error) {
		return &sandboxagent.ExecResult{TimedOut: true, ExitCode: 124}, nil
	}
	return h
}

func TestIdentityAndInstructions(t *testing.T) {
	traits := sandboxagent.Traits{Continue: true, Usage: true}
	id := NewIdentity("x", "reg/x:1", traits)
	if id.Name() != "x" || id.Image() != "reg/x:1" || id.Traits() != traits {
		t.Errorf("identity %q %q %+v", id.Name(), id.Image(), id.Traits())
	}
	h := drivertest.NewHostOps(t)
	in := Instructions{Files: Shell{Driver: "x", Dir: "$HOME/.x"}, RulesFile: "RULES.md", SkillsDir: "sk", Mode: ExecScripts}
	ctx := context.Background()
	if err := in.InstallRules(ctx, h, "short\n"); err != nil || h.Read(t, ".x/RULES.md") != "short\n" {
		t.Errorf("rules: %v", err)
	}
	sk := sandboxagent.Skill{Name: "s", Files: map[string][]byte{"SKILL.md": []byte("d\n"), "run": []byte("#!/bin/sh\n")}}
	if err := in.InstallSkill(ctx, h, sk); err != nil || h.Read(t, ".x/sk/s/SKILL.md") != "d\n" || mode(t, h, ".x/sk/s/run") != 0o755 {
		t.Errorf("skill: %v", err)
	}
	if err := in.InstallRules(ctx, h, ""); err != nil || h.Exists(".x/RULES.md") {
		t.Errorf("empty rules kept the file: %v", err)
	}
}

func TestBridgeDone(t *testing.T) {
	done := BridgeDone("codex", "warm_done")
	for _, tc := range []struct {
		line    string
		want    bool
		wantErr bool
	}{
		{`{"type":"warm_done","ok":true}`, true, false},
		{`{"type":"warm_done"}`, true, false},
		{`{"type":"warm_done","ok":false}`, false, true},
		{`{"type":"turn_end"}`, false, false},
		{`not json`, false, false},
	} {
		got, err := done([]byte(tc.line))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: %v %v", tc.line, got, err)
		}
	}
}
