package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/config"
	"github.com/sandbox-agent/sandbox-agent/runtime/startlimit"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	body := `{"gateway_url": "http://127.0.0.1:9", "max_concurrent_starts": 3, "docker_host": "unix:///f.sock", "keepalive": "2m"}`
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DOCKER_HOST": "unix:///e.sock", "GATEWAY_KEY": "sk-env"}
	lib, s, err := loadConfig(file, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if s.gatewayURL != "http://127.0.0.1:9" || s.maxConcurrentStarts != 3 || s.dockerHost != "unix:///e.sock" || s.gatewayKey != "sk-env" {
		t.Errorf("command-line keys: %+v", s)
	}
	if lib.Keepalive.Minutes() != 2 {
		t.Errorf("library key lost: keepalive %v", lib.Keepalive)
	}
	_, d, err := loadConfig("", func(string) string { return "" })
	if err != nil || d.gatewayURL != "http://127.0.0.1:4000" || d.gatewayKey != "sk-sandbox-agent" || d.maxConcurrentStarts != startlimit.DefaultWidth {
		t.Errorf("defaults: %+v, %v", d, err)
	}
}

func TestLoadConfigCheckpointKeys(t *testing.T) {
	_, d, err := loadConfig("", func(string) string { return "" })
	if err != nil || d.checkpointRetention != 168*time.Hour || d.serveTenantCheckpointBytes != 20<<30 {
		t.Errorf("defaults: retention %v, tenant bytes %d, %v", d.checkpointRetention, d.serveTenantCheckpointBytes, err)
	}
	file := filepath.Join(t.TempDir(), "config.json")
	body := `{"checkpoint_retention": "24h", "serve_tenant_checkpoint_bytes": 1073741824, "checkpoint_max_bytes": 1048576, "checkpoint_root": "/data/ck"}`
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	lib, s, err := loadConfig(file, func(string) string { return "" })
	if err != nil || s.checkpointRetention != 24*time.Hour || s.serveTenantCheckpointBytes != 1<<30 || lib.CheckpointMaxBytes != 1<<20 || lib.CheckpointRoot != "/data/ck" {
		t.Errorf("file: %v %d %d %q, %v", s.checkpointRetention, s.serveTenantCheckpointBytes, lib.CheckpointMaxBytes, lib.CheckpointRoot, err)
	}
	env := map[string]string{"SANDBOX_AGENT_CHECKPOINT_RETENTION": "3600", "SANDBOX_AGENT_SERVE_TENANT_CHECKPOINT_BYTES": "0"}
	_, s, err = loadConfig(file, func(k string) string { return env[k] })
	if err != nil || s.checkpointRetention != time.Hour || s.serveTenantCheckpointBytes != 0 {
		t.Errorf("environment: %v %d, %v", s.checkpointRetention, s.serveTenantCheckpointBytes, err)
	}
}

// max_concurrent_execs: 0 (the default) is no queue (connect makes none).
func TestLoadConfigMaxConcurrentExecs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(file, []byte(`{"max_concurrent_execs": 3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, file string
		env        map[string]string
		want       int
	}{
		{"default", "", nil, 0},
		{"file", file, nil, 3},
		{"environment over file", file, map[string]string{"SANDBOX_AGENT_MAX_CONCURRENT_EXECS": "12"}, 12},
		{"0 is the default", "", map[string]string{"SANDBOX_AGENT_MAX_CONCURRENT_EXECS": "0"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, s, err := loadConfig(tt.file, func(k string) string { return tt.env[k] })
			if err != nil || s.maxConcurrentExecs != tt.want {
				t.Fatalf("maxConcurrentExecs = %d, %v, want %d", s.maxConcurrentExecs, err, tt.want)
			}
		})
	}
}

func TestLoadConfigServeRepoRoot(t *testing.T) {
	_, d, err := loadConfig("", func(string) string { return "" })
	if err != nil || d.serveRepoRoot != "" {
		t.Errorf("default: %q, %v", d.serveRepoRoot, err)
	}
	env := map[string]string{"SANDBOX_AGENT_SERVE_REPO_ROOT": "/srv/repos"}
	_, s, err := loadConfig("", func(k string) string { return env[k] })
	if err != nil || s.serveRepoRoot != "/srv/repos" {
		t.Errorf("environment: %q, %v", s.serveRepoRoot, err)
	}
	dir, drop, err := serveRepoDir(memoryState)
	if err != nil || !filepath.IsAbs(dir) {
		t.Fatalf("serveRepoDir(:memory:) = %q, %v", dir, err)
	}
	drop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the temporary repository folder stays: %v", err)
	}
	if dir, _, _ := serveRepoDir("/var/x/state.db"); dir != "/var/x/state.db.repos" {
		t.Errorf("serveRepoDir(state file) = %q", dir)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for _, tt := range []struct{ body, key string }{
		{`{"max_concurrent_starts": 0}`, "max_concurrent_starts"},
		{`{"max_concurrent_execs": -1}`, "max_concurrent_execs"},
		{`{"gateway_ulr": "x"}`, "gateway_ulr"},
		{`{"timeout_exec": "soon"}`, "timeout_exec"},
		{`{"checkpoint_retention": "-1h"}`, "checkpoint_retention"},
		{`{"serve_tenant_checkpoint_bytes": -1}`, "serve_tenant_checkpoint_bytes"},
		{`{"serve_repo_root": "relative/repos"}`, "serve_repo_root"},
	} {
		file := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(file, []byte(tt.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := loadConfig(file, func(string) string { return "" })
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Key != tt.key {
			t.Errorf("%s: err = %v, want a config.Error for %s", tt.body, err, tt.key)
		}
	}
}

// One file holds both tables: the library accepts the command line's keys
// when told them, and only then (it holds none of its own), and the two
// tables do not share a name.
func TestKeyTablesPartitionTheFile(t *testing.T) {
	lib := map[string]bool{}
	for _, k := range config.Keys() {
		lib[k[0]] = true
	}
	for _, k := range settingsKeys {
		if lib[k.Name] {
			t.Errorf("key %s is in both tables", k.Name)
		}
		file := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(file, []byte(`{"`+k.Name+`": "1"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load(file, func(string) string { return "" }, settingsKeyNames()...); err != nil {
			t.Errorf("the library refuses the command line's key %s: %v", k.Name, err)
		}
		if _, err := config.Load(file, func(string) string { return "" }); err == nil {
			t.Errorf("the library accepts the command line's key %s untold", k.Name)
		}
	}
}

func TestSettingsKeysDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range settingsKeys {
		if !strings.Contains(string(readme), "`"+k.Name+"`") || !strings.Contains(string(readme), "`"+k.Env+"`") {
			t.Errorf("README does not document config key %s / %s", k.Name, k.Env)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for _, u := range []string{
		"postgres://u:s3cret@h:5432/db?sslmode=disable",
		"postgres://u@h/db?password=s3cret",
		"postgresql://h/db?PASSWORD=s3cret&sslmode=require",
		"postgres://u:s3cret@h/db?password=s3cret",
	} {
		got := redactURL(u)
		if strings.Contains(got, "s3cret") || !strings.HasPrefix(got, "postgres") {
			t.Errorf("redactURL(%q) = %q", u, got)
		}
	}
}

func TestOpenStateRefusesReadableFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openState(context.Background(), path, true); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("a state file of mode 0644: %v, want ErrInvalidArgument", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := openState(context.Background(), path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := openState(context.Background(), path, true); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("a second serve on the same state: %v, want ErrInvalidArgument (locked)", err)
	}
}
