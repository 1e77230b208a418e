package configfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type conf struct {
	Wait  time.Duration
	Name  string
	N     int64
	Flag  bool
	Other string
}

var keys = []Key[conf]{
	Duration("wait", func(c *conf) *time.Duration { return &c.Wait }),
	String("name", "NAME", func(c *conf) *string { return &c.Name }),
	Int("n", 2, func(c *conf, n int64) { c.N = n }),
	Bool("flag", "FLAG", func(c *conf) *bool { return &c.Flag }),
}

func file(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	env := map[string]string{"NAME": "from-env", "SANDBOX_AGENT_WAIT": "3"}
	c := conf{Name: "default", N: 5}
	err := Load(&c, file(t, `{"wait": "1m", "name": "from-file", "flag": true, "theirs": 1}`), func(k string) string { return env[k] }, keys, []string{"theirs"})
	if err != nil {
		t.Fatal(err)
	}
	want := conf{Wait: 3 * time.Second, Name: "from-env", N: 5, Flag: true}
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	// A missing file and no path are fine; the value keeps its defaults.
	for _, p := range []string{"", filepath.Join(t.TempDir(), "none.json")} {
		d := conf{N: 7}
		if err := Load(&d, p, func(string) string { return "" }, keys, nil); err != nil || d.N != 7 {
			t.Errorf("path %q: %+v, %v", p, d, err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, body string
		env        map[string]string
		key, msg   string
	}{
		{"unknown key", `{"nmae": "x"}`, nil, "nmae", "unknown key"},
		{"below min", `{"n": 1}`, nil, "n", "at least 2"},
		{"not a number", `{"n": "many"}`, nil, "n", "not an integer"},
		{"zero duration", `{"wait": 0}`, nil, "wait", "must be positive"},
		{"bad duration", `{"wait": "soon"}`, nil, "wait", "not a duration"},
		{"nested value", `{"name": {"a": 1}}`, nil, "name", "want a string"},
		{"bad bool env", `{}`, map[string]string{"FLAG": "maybe"}, "flag", "environment variable FLAG"},
		{"not an object", `[]`, nil, "", "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c conf
			err := Load(&c, file(t, tt.body), func(k string) string { return tt.env[k] }, keys, nil)
			var fe *Error
			if !errors.As(err, &fe) || fe.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want key %q and %q", err, tt.key, tt.msg)
			}
		})
	}
}
