package audit

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLogAppendsAndRedacts(t *testing.T) {
	root := t.TempDir()
	day := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	secret := "sk-very-secret-key"
	l, err := Open(root, day, "ses_123", []string{secret, "ab"})
	if err != nil {
		t.Fatal(err)
	}
	l.Raw([]byte(`{"line":1,"key":"` + secret + `"}`))
	l.Event(map[string]any{"kind": "text", "payload": map[string]string{"text": "about " + secret}})
	l.Status(Status{SessionID: "ses_123", Turns: []TurnStatus{{Turn: 1, Prompt: "use KEY=" + secret}}})
	l.Close()
	// A second turn appends to the same folder.
	l, err = Open(root, day, "ses_123", []string{secret})
	if err != nil {
		t.Fatal(err)
	}
	l.Raw([]byte(`{"line":2}`))
	l.Status(Status{SessionID: "ses_123", Turns: []TurnStatus{{Turn: 1}, {Turn: 2}}})
	l.Close()

	dir := filepath.Join(root, "20261129", "ses_123")
	if l.Dir() != dir {
		t.Fatalf("dir %s", l.Dir())
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "session.jsonl"))
	if string(raw) != `{"line":1,"key":"[REDACTED]"}`+"\n"+`{"line":2}`+"\n" {
		t.Errorf("session.jsonl = %q", raw)
	}
	status, _ := os.ReadFile(filepath.Join(dir, "status.json"))
	if !strings.Contains(string(status), `"turn": 2`) {
		t.Errorf("status.json = %s", status)
	}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), secret) {
			t.Errorf("%s contains the secret", p)
		}
		if strings.HasPrefix(d.Name(), ".status-") {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})
	// The short "secret" was not applied.
	ev, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	sc := bufio.NewScanner(strings.NewReader(string(ev)))
	n := 0
	for sc.Scan() {
		n++
	}
	if n != 1 || !strings.Contains(string(ev), "about [REDACTED]") {
		t.Errorf("events.jsonl = %q", ev)
	}
}

func TestFolderNameIsSafe(t *testing.T) {
	tests := []struct {
		id   string
		same bool
	}{
		{"ses_abc123", true},
		{"01a22689-2083-7030-b84e-8a1641694d77", true},
		{"../../etc", false},
		{"a/b", false},
		{"..", false},
		{"", false},
		{".hidden", false},
		{strings.Repeat("a", 200), false},
		{"a..b", false},
	}
	for _, tt := range tests {
		got := FolderName(tt.id)
		if (got == tt.id) != tt.same {
			t.Errorf("FolderName(%q) = %q", tt.id, got)
		}
		if strings.ContainsAny(got, `/\`) || got == ".." || got == "." || got == "" {
			t.Errorf("FolderName(%q) = %q is unsafe", tt.id, got)
		}
	}
}

func TestPrune(t *testing.T) {
	root := t.TempDir()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, d := range []string{"20261129", "20261122", "20261121", "20250101", "notadate", "2026112"} {
		os.MkdirAll(filepath.Join(root, d, "s"), 0o700)
	}
	if err := Prune(root, 7, now); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if got := strings.Join(left, ","); got != "2026112,20261122,20261129,notadate" {
		t.Errorf("left %s", got)
	}
	if err := Prune(root, 0, now.AddDate(5, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 4 {
		t.Errorf("retention 0 deleted something")
	}
	if err := Prune(filepath.Join(root, "missing"), 7, now); err != nil {
		t.Errorf("missing root: %v", err)
	}
}

// Resume finds a session's newest folder and counts its raw lines; a
// session without a folder is nil, and an oversized status.json is left
// out.
func TestResume(t *testing.T) {
	root := t.TempDir()
	if r, err := Resume(filepath.Join(root, "missing"), "s1", 1<<20); r != nil || err != nil {
		t.Fatalf("missing root: %+v %v", r, err)
	}
	old := time.Date(2026, 11, 27, 23, 0, 0, 0, time.Local)
	day := time.Date(2026, 11, 29, 10, 0, 0, 0, time.Local)
	for _, d := range []time.Time{old, day} {
		l, err := Open(root, d, "s1", nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Raw([]byte(`{"a":1}`))
		l.Raw([]byte(`{"a":2}`))
		l.Status(Status{SessionID: "s1"})
		l.Close()
	}
	os.MkdirAll(filepath.Join(root, "20261130", "other"), 0o700)
	os.MkdirAll(filepath.Join(root, "notadate", "s1"), 0o700)
	r, err := Resume(root, "s1", 1<<20)
	if err != nil || r == nil {
		t.Fatalf("Resume: %+v %v", r, err)
	}
	if r.Dir != Folder(root, day, "s1") || r.Date.Format(DateLayout) != "20261129" || r.Lines != 2 || r.Status == nil || r.Status.SessionID != "s1" {
		t.Errorf("Resume: %+v", r)
	}
	if r, _ := Resume(root, "s1", 4); r == nil || r.Status != nil {
		t.Errorf("oversized status.json: %+v", r)
	}
	if r, _ := Resume(root, "s2", 1<<20); r != nil {
		t.Errorf("unknown session: %+v", r)
	}
}
