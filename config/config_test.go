package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigPrecedence(t *testing.T) {
	file := writeConfig(t, `{"timeout_exec": "90s", "timeout_ask": 120, "keepalive": "2h", "audit": false, "image_name": "from-file/x", "max_download_bytes": 1000}`)
	tests := []struct {
		name  string
		path  string
		env   map[string]string
		check func(t *testing.T, c sandboxagent.Config)
	}{
		{"defaults", "", nil, func(t *testing.T, c sandboxagent.Config) {
			d := sandboxagent.DefaultConfig()
			if c.Timeouts != d.Timeouts || c.Keepalive != time.Hour || !c.AuditEnabled || c.AuditRetentionDays != 7 {
				t.Errorf("got %+v", c)
			}
		}},
		{"missing file is fine", filepath.Join(t.TempDir(), "nope.json"), nil, func(t *testing.T, c sandboxagent.Config) {
			if c.Timeouts.Exec != sandboxagent.DefaultConfig().Timeouts.Exec {
				t.Errorf("got %v", c.Timeouts.Exec)
			}
		}},
		{"file over defaults", file, nil, func(t *testing.T, c sandboxagent.Config) {
			if c.Timeouts.Exec != 90*time.Second || c.Timeouts.Ask != 120*time.Second || c.Keepalive != 2*time.Hour ||
				c.AuditEnabled || c.ImageName != "from-file/x" || c.MaxDownloadBytes != 1000 {
				t.Errorf("got %+v", c)
			}
			if c.Timeouts.Start != sandboxagent.DefaultConfig().Timeouts.Start {
				t.Errorf("unset key changed: %v", c.Timeouts.Start)
			}
		}},
		{"env over file", file, map[string]string{"SANDBOX_AGENT_TIMEOUT_EXEC": "5m", "SANDBOX_AGENT_IMAGE_NAME": "reg.example/x"}, func(t *testing.T, c sandboxagent.Config) {
			if c.Timeouts.Exec != 5*time.Minute || c.ImageName != "reg.example/x" {
				t.Errorf("got %+v", c)
			}
			if c.Keepalive != 2*time.Hour {
				t.Errorf("file value lost: %v", c.Keepalive)
			}
		}},
		{"SSL_CERT_FILE is the CA default", "", map[string]string{"SSL_CERT_FILE": "/etc/ca.pem"}, func(t *testing.T, c sandboxagent.Config) {
			if c.CACertFile != "/etc/ca.pem" {
				t.Errorf("got %q", c.CACertFile)
			}
		}},
		{"a program's own keys, named, are accepted and left alone", writeConfig(t, `{"gateway_url": "http://127.0.0.1:9", "docker_host": "unix:///x.sock", "gateway_key": "k", "max_concurrent_starts": 3, "keepalive": 60}`), nil, func(t *testing.T, c sandboxagent.Config) {
			if c.Keepalive != time.Minute {
				t.Errorf("got %+v", c)
			}
		}},
		{"egress and allow_hosts from the file (array) and the environment (comma-separated)", writeConfig(t, `{"egress": "open", "allow_hosts": ["registry.npmjs.org", "*.example.com:8443"]}`), nil, func(t *testing.T, c sandboxagent.Config) {
			if c.Egress != sandboxagent.EgressOpen || strings.Join(c.AllowHosts, " ") != "registry.npmjs.org *.example.com:8443" {
				t.Errorf("got %q %q", c.Egress, c.AllowHosts)
			}
		}},
		{"allow_hosts from the environment wins", writeConfig(t, `{"allow_hosts": ["a.org"]}`), map[string]string{"SANDBOX_AGENT_ALLOW_HOSTS": " b.org, c.org ", "SANDBOX_AGENT_EGRESS": "none"}, func(t *testing.T, c sandboxagent.Config) {
			if c.Egress != sandboxagent.EgressNone || strings.Join(c.AllowHosts, " ") != "b.org c.org" {
				t.Errorf("got %q %q", c.Egress, c.AllowHosts)
			}
		}},
		{"image_policy: default pull-or-build, file, environment wins", writeConfig(t, `{"image_policy": "pull"}`), map[string]string{"SANDBOX_AGENT_IMAGE_POLICY": "never"}, func(t *testing.T, c sandboxagent.Config) {
			if c.ImagePolicy != catalog.PolicyNever || sandboxagent.DefaultConfig().ImagePolicy != catalog.PolicyPullOrBuild {
				t.Errorf("got %q, default %q", c.ImagePolicy, sandboxagent.DefaultConfig().ImagePolicy)
			}
		}},
		{"image_verify: off by default, strict from the file, the environment wins", writeConfig(t, `{"image_verify": "strict"}`), map[string]string{"SANDBOX_AGENT_IMAGE_VERIFY": " off "}, func(t *testing.T, c sandboxagent.Config) {
			if c.ImageVerify != catalog.VerifyOff || sandboxagent.DefaultConfig().ImageVerify != catalog.VerifyOff {
				t.Errorf("got %q", c.ImageVerify)
			}
			if c, err := Load(writeConfig(t, `{"image_verify": "strict"}`), envMap(nil)); err != nil || c.ImageVerify != catalog.VerifyStrict {
				t.Errorf("from the file: %q, %v", c.ImageVerify, err)
			}
		}},
		{"checkpoint keys: defaults", "", nil, func(t *testing.T, c sandboxagent.Config) {
			if c.CheckpointMaxBytes != 4<<30 || !filepath.IsAbs(c.CheckpointRoot) || c.CheckpointRoot != sandboxagent.DefaultConfig().CheckpointRoot {
				t.Errorf("got %d %q", c.CheckpointMaxBytes, c.CheckpointRoot)
			}
		}},
		{"checkpoint keys: from the file", writeConfig(t, `{"checkpoint_max_bytes": 1048576, "checkpoint_root": "/data/ck/"}`), nil, func(t *testing.T, c sandboxagent.Config) {
			if c.CheckpointMaxBytes != 1<<20 || c.CheckpointRoot != "/data/ck" {
				t.Errorf("got %d %q", c.CheckpointMaxBytes, c.CheckpointRoot)
			}
		}},
		{"checkpoint keys: the environment wins", writeConfig(t, `{"checkpoint_max_bytes": 1048576, "checkpoint_root": "/data/ck"}`), map[string]string{"SANDBOX_AGENT_CHECKPOINT_MAX_BYTES": "2048", "SANDBOX_AGENT_CHECKPOINT_ROOT": "/env/ck"}, func(t *testing.T, c sandboxagent.Config) {
			if c.CheckpointMaxBytes != 2048 || c.CheckpointRoot != "/env/ck" {
				t.Errorf("got %d %q", c.CheckpointMaxBytes, c.CheckpointRoot)
			}
		}},
		{"retention zero allowed", "", map[string]string{"SANDBOX_AGENT_AUDIT_RETENTION_DAYS": "0"}, func(t *testing.T, c sandboxagent.Config) {
			if c.AuditRetentionDays != 0 {
				t.Errorf("got %d", c.AuditRetentionDays)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.path, envMap(tt.env), "gateway_url", "docker_host", "gateway_key", "max_concurrent_starts")
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		env       map[string]string
		wantKey   string
		wantInMsg string
	}{
		{"bad env duration", "", map[string]string{"SANDBOX_AGENT_TIMEOUT_EXEC": "soon"}, "timeout_exec", "SANDBOX_AGENT_TIMEOUT_EXEC"},
		{"negative duration", "", map[string]string{"SANDBOX_AGENT_KEEPALIVE": "-5s"}, "keepalive", "must be positive"},
		{"bad bool", "", map[string]string{"SANDBOX_AGENT_AUDIT": "maybe"}, "audit", "not a boolean"},
		{"bad int", `{"max_download_entries": "many"}`, nil, "max_download_entries", "config.json"},
		{"negative retention", `{"audit_retention_days": -1}`, nil, "audit_retention_days", "at least 0"},
		{"unknown key", `{"timeout_exce": "1s"}`, nil, "timeout_exce", "unknown key"},
		{"not an object", `[1,2]`, nil, "", "not a JSON object"},
		{"object value", `{"timeout_exec": {"s": 1}}`, nil, "timeout_exec", "want a string"},
		{"bad egress", `{"egress": "wide"}`, nil, "egress", "want none, model or open"},
		{"bad image policy", "", map[string]string{"SANDBOX_AGENT_IMAGE_POLICY": "sometimes"}, "image_policy", "want pull-or-build, pull or never"},
		{"bad image_verify", "", map[string]string{"SANDBOX_AGENT_IMAGE_VERIFY": "on"}, "image_verify", "want off or strict"},
		{"allow_hosts not strings", `{"allow_hosts": ["a.org", 3]}`, nil, "allow_hosts", "array of strings"},
		{"allow_hosts bad pattern", `{"allow_hosts": ["a.org", "*"]}`, nil, "allow_hosts", `allow host "*"`},
		{"checkpoint_max_bytes zero", `{"checkpoint_max_bytes": 0}`, nil, "checkpoint_max_bytes", "at least 1"},
		{"checkpoint_max_bytes not a number", "", map[string]string{"SANDBOX_AGENT_CHECKPOINT_MAX_BYTES": "4g"}, "checkpoint_max_bytes", "not an integer"},
		{"checkpoint_root relative", "", map[string]string{"SANDBOX_AGENT_CHECKPOINT_ROOT": "ck"}, "checkpoint_root", "want an absolute path"},
		{"oci_runtime a path", "", map[string]string{"SANDBOX_AGENT_OCI_RUNTIME": "/usr/bin/runsc"}, "oci_runtime", "want a runtime's name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = writeConfig(t, tt.file)
			}
			_, err := Load(path, envMap(tt.env))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if ce.Key != tt.wantKey {
				t.Errorf("key = %q, want %q", ce.Key, tt.wantKey)
			}
			if !strings.Contains(err.Error(), tt.wantInMsg) {
				t.Errorf("%q does not mention %q", err, tt.wantInMsg)
			}
			// Errors of the packages the keys are checked by (images/catalog,
			// internal/hardening) reach the caller as sandboxagent.ErrInvalidArgument.
			if (strings.HasPrefix(tt.wantKey, "image_") || tt.wantKey == "oci_runtime") && !errors.Is(err, sandboxagent.ErrInvalidArgument) {
				t.Errorf("%v is not sandboxagent.ErrInvalidArgument", err)
			}
		})
	}
}

func TestConfigKeysDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if !strings.Contains(string(readme), "`"+k[0]+"`") || !strings.Contains(string(readme), "`"+k[1]+"`") {
			t.Errorf("README does not document config key %s / %s", k[0], k[1])
		}
	}
}

func TestParseDisk(t *testing.T) {
	for _, bad := range []string{"1m", "lots", "-5g", ""} {
		if _, err := ParseDisk(bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("ParseDisk(%q): %v", bad, err)
		}
	}
	if n, err := ParseDisk("none"); n != -1 || err != nil {
		t.Errorf("none: %d %v", n, err)
	}
	if n, err := ParseDisk("10g"); n != 10<<30 || err != nil {
		t.Errorf("10g: %d %v", n, err)
	}
}

func TestPrices(t *testing.T) {
	c, err := Load(writeConfig(t, `{"prices": {"my-model": {"input": 1, "output": 4, "cache_read": 0.1}, "gpt-5.5": {"input": 2, "output": 8}}}`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Prices["my-model"]; p.Input != 1 || p.Output != 4 || p.CacheRead != 0.1 {
		t.Errorf("my-model %+v", p)
	}
	if p := c.Prices["gpt-5.5"]; p.Input != 2 {
		t.Errorf("gpt-5.5 not replaced: %+v", p)
	}
	if _, ok := c.Prices["claude-sonnet-4-5"]; !ok {
		t.Error("the built-in prices are gone")
	}
	env := map[string]string{"SANDBOX_AGENT_PRICES": `{"env-model": {"input": 3, "output": 3}}`}
	if c, err = Load("", func(k string) string { return env[k] }); err != nil || c.Prices["env-model"].Input != 3 {
		t.Errorf("from the environment: %v %+v", err, c.Prices["env-model"])
	}
	for _, bad := range []string{`{"m": {"input": -1}}`, `{"m": {"inptu": 1}}`, `{"m": 3}`, `[1]`, `{"": {}}`, `{} {}`} {
		env := map[string]string{"SANDBOX_AGENT_PRICES": bad}
		var ce *Error
		if _, err := Load("", func(k string) string { return env[k] }); !errors.As(err, &ce) || ce.Key != "prices" || !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("prices %s: %v", bad, err)
		}
	}
}
