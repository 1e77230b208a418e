package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

func TestLoadConfigErrors(t *testing.T) {
	for _, tt := range []struct{ body, key string }{
		{`{"max_concurrent_starts": 0}`, "max_concurrent_starts"},
		{`{"gateway_ulr": "x"}`, "gateway_ulr"},
		{`{"timeout_exec": "soon"}`, "timeout_exec"},
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
