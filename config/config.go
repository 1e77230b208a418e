// Package config loads the library's configuration (sandboxagent.Config)
// once: built-in defaults, then a JSON config file, then the environment.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/go-units"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/configfile"
	"github.com/sandbox-agent/sandbox-agent/internal/hardening"
	"github.com/sandbox-agent/sandbox-agent/metering"
)

// Error is an invalid configuration value, naming the key and the source
// it came from (a file path or an environment variable); Key is empty when
// the file as a whole is unusable. It wraps sandboxagent.ErrInvalidArgument
// when the value was refused as one.
type Error = configfile.Error

// invalidArgument adds sandboxagent.ErrInvalidArgument to the chain of
// an images/catalog error, keeping its message.
func invalidArgument(err error) error {
	if err == nil {
		return nil
	}
	return argumentError{err}
}

type argumentError struct{ error }

func (e argumentError) Unwrap() []error { return []error{e.error, sandboxagent.ErrInvalidArgument} }

// keys is the table of every library key; README documents the same
// table (together with the command line's keys).
var keys = []configfile.Key[sandboxagent.Config]{
	configfile.Duration("timeout_start", func(c *sandboxagent.Config) *time.Duration { return &c.Timeouts.Start }),
	configfile.Duration("timeout_exec", func(c *sandboxagent.Config) *time.Duration { return &c.Timeouts.Exec }),
	configfile.Duration("timeout_ask", func(c *sandboxagent.Config) *time.Duration { return &c.Timeouts.Ask }),
	configfile.Duration("timeout_copy", func(c *sandboxagent.Config) *time.Duration { return &c.Timeouts.Copy }),
	configfile.Duration("keepalive", func(c *sandboxagent.Config) *time.Duration { return &c.Keepalive }),
	configfile.Duration("max_lifetime", func(c *sandboxagent.Config) *time.Duration { return &c.MaxLifetime }),
	configfile.String("image_name", "SANDBOX_AGENT_IMAGE_NAME", func(c *sandboxagent.Config) *string { return &c.ImageName }),
	{Name: "image_policy", Env: "SANDBOX_AGENT_IMAGE_POLICY", Apply: func(c *sandboxagent.Config, raw string) error {
		p, err := catalog.ParsePolicy(strings.TrimSpace(raw))
		c.ImagePolicy = p
		return invalidArgument(err)
	}},
	configfile.String("ca_cert_file", "SANDBOX_AGENT_CA_CERT_FILE", func(c *sandboxagent.Config) *string { return &c.CACertFile }),
	{Name: "image_verify", Env: "SANDBOX_AGENT_IMAGE_VERIFY", Apply: func(c *sandboxagent.Config, raw string) error {
		v, err := catalog.ParseVerify(strings.TrimSpace(raw))
		c.ImageVerify = v
		return invalidArgument(err)
	}},
	configfile.Int("max_download_bytes", 1, func(c *sandboxagent.Config, n int64) { c.MaxDownloadBytes = n }),
	configfile.Int("max_download_entries", 1, func(c *sandboxagent.Config, n int64) { c.MaxDownloadEntries = int(n) }),
	configfile.Int("max_download_depth", 1, func(c *sandboxagent.Config, n int64) { c.MaxDownloadDepth = int(n) }),
	configfile.Int("max_output_bytes", 1, func(c *sandboxagent.Config, n int64) { c.MaxOutputBytes = n }),
	configfile.Int("max_turn_lines", 1, func(c *sandboxagent.Config, n int64) { c.Limits.TurnLines = int(n) }),
	configfile.Int("max_turn_events", 1, func(c *sandboxagent.Config, n int64) { c.Limits.TurnEvents = int(n) }),
	configfile.Int("max_turn_event_bytes", 1, func(c *sandboxagent.Config, n int64) { c.Limits.TurnEventBytes = n }),
	configfile.Int("max_audit_turn_bytes", 1, func(c *sandboxagent.Config, n int64) { c.Limits.AuditTurnBytes = n }),
	configfile.Int("max_audit_session_bytes", 1, func(c *sandboxagent.Config, n int64) { c.Limits.AuditSessionBytes = n }),
	configfile.Int("max_audit_day_bytes", 1, func(c *sandboxagent.Config, n int64) { c.Limits.AuditDayBytes = n }),
	{Name: "egress", Env: "SANDBOX_AGENT_EGRESS", Apply: func(c *sandboxagent.Config, raw string) error {
		e, err := sandboxagent.ParseEgress(strings.TrimSpace(raw))
		c.Egress = e
		return err
	}},
	configfile.List("allow_hosts", "SANDBOX_AGENT_ALLOW_HOSTS", func(c *sandboxagent.Config) *[]string { return &c.AllowHosts }, sandboxagent.CheckAllowHosts),
	{Name: "disk", Env: "SANDBOX_AGENT_DISK", Apply: func(c *sandboxagent.Config, raw string) error {
		n, err := ParseDisk(strings.TrimSpace(raw))
		c.DiskBytes = n
		return err
	}},
	{Name: "oci_runtime", Env: "SANDBOX_AGENT_OCI_RUNTIME", Apply: func(c *sandboxagent.Config, raw string) error {
		c.OCIRuntime = strings.TrimSpace(raw)
		return hardening.CheckOCIRuntime(c.OCIRuntime)
	}},
	{Name: "prices", Env: "SANDBOX_AGENT_PRICES", Object: true, Apply: func(c *sandboxagent.Config, raw string) error {
		p, err := ParsePrices(raw)
		if err != nil {
			return err
		}
		c.Prices = metering.DefaultPrices().Merge(p)
		return nil
	}},
	configfile.Int("checkpoint_max_bytes", 1, func(c *sandboxagent.Config, n int64) { c.CheckpointMaxBytes = n }),
	{Name: "checkpoint_root", Env: "SANDBOX_AGENT_CHECKPOINT_ROOT", Apply: func(c *sandboxagent.Config, raw string) error {
		if !filepath.IsAbs(raw) {
			return fmt.Errorf("%w: checkpoint_root %q: want an absolute path", sandboxagent.ErrInvalidArgument, raw)
		}
		c.CheckpointRoot = filepath.Clean(raw)
		return nil
	}},
	configfile.Bool("per_turn", "SANDBOX_AGENT_PER_TURN", func(c *sandboxagent.Config) *bool { return &c.PerTurn }),
	configfile.Bool("audit", "SANDBOX_AGENT_AUDIT", func(c *sandboxagent.Config) *bool { return &c.AuditEnabled }),
	configfile.String("audit_root", "SANDBOX_AGENT_AUDIT_ROOT", func(c *sandboxagent.Config) *string { return &c.AuditRoot }),
	configfile.Int("audit_retention_days", 0, func(c *sandboxagent.Config, n int64) { c.AuditRetentionDays = int(n) }),
}

// DefaultPath is ~/.config/sandbox-agent/config.json (XDG_CONFIG_HOME
// is honoured).
func DefaultPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "sandbox-agent", "config.json")
}

// Load builds the configuration from defaults, then the config file
// at path (a missing file is fine; "" means none), then the environment as
// given by getenv (os.Getenv in production; a map in tests). An invalid
// value, or a key of the file that is neither the library's nor one of
// programKeys (a program's own keys of the same file, which Load
// leaves alone: the command line passes its own), is an *Error
// naming the key and where it came from.
func Load(path string, getenv func(string) string, programKeys ...string) (sandboxagent.Config, error) {
	cfg := sandboxagent.DefaultConfig()
	if v := getenv("SSL_CERT_FILE"); v != "" {
		cfg.CACertFile = v
	}
	if err := configfile.Load(&cfg, path, getenv, keys, programKeys); err != nil {
		return sandboxagent.Config{}, err
	}
	return cfg, nil
}

// Keys lists every library configuration key with its environment
// variable, in documentation order.
func Keys() [][2]string {
	out := make([][2]string, len(keys))
	for i, k := range keys {
		out[i] = [2]string{k.Name, k.Env}
	}
	return out
}

// ParseDisk reads a disk limit: a size of at least 64m ("10g", "512m",
// binary units), or "none" (-1: no limit, not even the default).
func ParseDisk(v string) (int64, error) {
	if v == "none" {
		return -1, nil
	}
	n, err := units.RAMInBytes(v)
	if err != nil || n < 64<<20 {
		return 0, fmt.Errorf("%w: disk %q: want a size of at least 64m, like 10g, or none", sandboxagent.ErrInvalidArgument, v)
	}
	return n, nil
}

// ParsePrices reads the prices key: a JSON object of model names to
// prices in US dollars per million tokens ({"my-model": {"input": 1,
// "output": 4, "cache_read": 0.1, "cache_write": 1.25}}).
func ParsePrices(raw string) (metering.Prices, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var p metering.Prices
	err := dec.Decode(&p)
	if err == nil && dec.More() {
		err = errors.New("text after the object")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: prices: want an object of model names to {\"input\", \"output\", \"cache_read\", \"cache_write\"} in US dollars per million tokens: %w", sandboxagent.ErrInvalidArgument, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", sandboxagent.ErrInvalidArgument, err)
	}
	return p, nil
}
