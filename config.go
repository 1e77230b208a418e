package sandboxagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the whole configuration, loaded once (LoadConfig) and passed
// down. Precedence: environment > config file > built-in defaults.
type Config struct {
	// Timeouts by category; a call given no timeout uses its category.
	Timeouts Timeouts
	// Keepalive is how long a sandbox may sit idle (no command running)
	// before it stops and removes itself, even if the host process died.
	Keepalive time.Duration

	// DockerHost overrides DOCKER_HOST for the engine connection.
	DockerHost string
	// ImageName replaces the repository part of every derived image tag
	// (for a private registry).
	ImageName string
	// CACertFile names a PEM bundle that image builds and (when
	// TrustCACert is set) running sandboxes trust, for TLS-intercepting
	// proxies. Defaults to $SSL_CERT_FILE.
	CACertFile string

	// Download caps: the archive that comes out of a container is hostile.
	MaxDownloadBytes   int64
	MaxDownloadEntries int
	MaxDownloadDepth   int
	// MaxOutputBytes caps what Exec captures of stdout and of stderr.
	MaxOutputBytes int64

	// Audit trail of agent sessions.
	AuditEnabled       bool
	AuditRoot          string
	AuditRetentionDays int

	// Gateway for the CLIs that can go through an OpenAI/Anthropic
	// compatible gateway (everything but opencode).
	GatewayURL string
	GatewayKey string

	// MaxConcurrentStarts bounds how many sandboxes start at once.
	MaxConcurrentStarts int
}

// Timeouts groups every timeout by category.
type Timeouts struct {
	Start time.Duration // create + start + first exec of a sandbox
	Exec  time.Duration // one command in a sandbox
	Ask   time.Duration // one agent turn
	Copy  time.Duration // one upload or download
}

// DefaultConfig returns the built-in defaults.
func DefaultConfig() Config {
	return Config{
		Timeouts: Timeouts{
			Start: 2 * time.Minute,
			Exec:  10 * time.Minute,
			Ask:   30 * time.Minute,
			Copy:  5 * time.Minute,
		},
		Keepalive:           time.Hour,
		MaxDownloadBytes:    1 << 30,
		MaxDownloadEntries:  100_000,
		MaxDownloadDepth:    64,
		MaxOutputBytes:      64 << 20,
		AuditEnabled:        true,
		AuditRoot:           filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-agent-%d", os.Getuid())),
		AuditRetentionDays:  7,
		GatewayURL:          "http://127.0.0.1:4000",
		GatewayKey:          "sk-sandbox-agent",
		MaxConcurrentStarts: 8,
	}
}

// configKey is one documented configuration key: its name in config.json,
// its environment variable, and how to apply a raw value to a Config.
type configKey struct {
	name  string
	env   string
	apply func(c *Config, raw string) error
}

func durationKey(name string, field func(*Config) *time.Duration) configKey {
	return configKey{name: name, env: envName(name), apply: func(c *Config, raw string) error {
		d, err := parseDuration(raw)
		if err != nil {
			return err
		}
		*field(c) = d
		return nil
	}}
}

func stringKey(name, env string, field func(*Config) *string) configKey {
	return configKey{name: name, env: env, apply: func(c *Config, raw string) error {
		*field(c) = raw
		return nil
	}}
}

func intKey(name string, min int64, field func(*Config, int64)) configKey {
	return configKey{name: name, env: envName(name), apply: func(c *Config, raw string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer: %q", raw)
		}
		if n < min {
			return fmt.Errorf("must be at least %d, got %d", min, n)
		}
		field(c, n)
		return nil
	}}
}

func envName(key string) string { return "SANDBOX_AGENT_" + strings.ToUpper(key) }

// configKeys is the table of every key; README documents the same table.
var configKeys = []configKey{
	durationKey("timeout_start", func(c *Config) *time.Duration { return &c.Timeouts.Start }),
	durationKey("timeout_exec", func(c *Config) *time.Duration { return &c.Timeouts.Exec }),
	durationKey("timeout_ask", func(c *Config) *time.Duration { return &c.Timeouts.Ask }),
	durationKey("timeout_copy", func(c *Config) *time.Duration { return &c.Timeouts.Copy }),
	durationKey("keepalive", func(c *Config) *time.Duration { return &c.Keepalive }),
	stringKey("docker_host", "DOCKER_HOST", func(c *Config) *string { return &c.DockerHost }),
	stringKey("image_name", "SANDBOX_AGENT_IMAGE_NAME", func(c *Config) *string { return &c.ImageName }),
	stringKey("ca_cert_file", "SANDBOX_AGENT_CA_CERT_FILE", func(c *Config) *string { return &c.CACertFile }),
	intKey("max_download_bytes", 1, func(c *Config, n int64) { c.MaxDownloadBytes = n }),
	intKey("max_download_entries", 1, func(c *Config, n int64) { c.MaxDownloadEntries = int(n) }),
	intKey("max_download_depth", 1, func(c *Config, n int64) { c.MaxDownloadDepth = int(n) }),
	intKey("max_output_bytes", 1, func(c *Config, n int64) { c.MaxOutputBytes = n }),
	{name: "audit", env: "SANDBOX_AGENT_AUDIT", apply: func(c *Config, raw string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("not a boolean: %q", raw)
		}
		c.AuditEnabled = b
		return nil
	}},
	stringKey("audit_root", "SANDBOX_AGENT_AUDIT_ROOT", func(c *Config) *string { return &c.AuditRoot }),
	intKey("audit_retention_days", 0, func(c *Config, n int64) { c.AuditRetentionDays = int(n) }),
	stringKey("gateway_url", "GATEWAY_URL", func(c *Config) *string { return &c.GatewayURL }),
	stringKey("gateway_key", "GATEWAY_KEY", func(c *Config) *string { return &c.GatewayKey }),
	intKey("max_concurrent_starts", 1, func(c *Config, n int64) { c.MaxConcurrentStarts = int(n) }),
}

// parseDuration accepts Go durations ("90s", "1h30m") and plain seconds.
func parseDuration(raw string) (time.Duration, error) {
	raw = strings.TrimSpace(raw)
	if secs, err := strconv.ParseFloat(raw, 64); err == nil {
		if secs <= 0 {
			return 0, fmt.Errorf("must be positive, got %q", raw)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		return 0, fmt.Errorf("not a duration (e.g. 90s, 5m, or seconds): %q", raw)
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", raw)
	}
	return d, nil
}

// DefaultConfigPath is ~/.config/sandbox-agent/config.json (XDG_CONFIG_HOME
// is honoured).
func DefaultConfigPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "sandbox-agent", "config.json")
}

// LoadConfig builds the configuration from defaults, then the config file
// at path (a missing file is fine; "" means none), then the environment as
// given by getenv (os.Getenv in production; a map in tests). An invalid
// value is a *ConfigError naming the key and where it came from.
func LoadConfig(path string, getenv func(string) string) (Config, error) {
	cfg := DefaultConfig()
	if v := getenv("SSL_CERT_FILE"); v != "" {
		cfg.CACertFile = v
	}
	if path != "" {
		if err := applyFile(&cfg, path); err != nil {
			return Config{}, err
		}
	}
	for _, k := range configKeys {
		raw := getenv(k.env)
		if raw == "" {
			continue
		}
		if err := k.apply(&cfg, raw); err != nil {
			return Config{}, &ConfigError{Key: k.name, Source: "environment variable " + k.env, Err: err}
		}
	}
	return cfg, nil
}

func applyFile(cfg *Config, path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &ConfigError{Source: path, Err: err}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return &ConfigError{Source: path, Err: fmt.Errorf("not a JSON object: %w", err)}
	}
	known := make(map[string]configKey, len(configKeys))
	for _, k := range configKeys {
		known[k.name] = k
	}
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		k, ok := known[name]
		if !ok {
			return &ConfigError{Key: name, Source: path, Err: errors.New("unknown key")}
		}
		var s string
		var v any
		if err := json.Unmarshal(raw[name], &v); err != nil {
			return &ConfigError{Key: name, Source: path, Err: err}
		}
		switch t := v.(type) {
		case string:
			s = t
		case float64:
			s = strconv.FormatFloat(t, 'f', -1, 64)
		case bool:
			s = strconv.FormatBool(t)
		default:
			return &ConfigError{Key: name, Source: path, Err: fmt.Errorf("want a string, number or boolean, got %s", raw[name])}
		}
		if err := k.apply(cfg, s); err != nil {
			return &ConfigError{Key: name, Source: path, Err: err}
		}
	}
	return nil
}

// ConfigKeys lists every configuration key with its environment variable,
// in documentation order.
func ConfigKeys() [][2]string {
	out := make([][2]string, len(configKeys))
	for i, k := range configKeys {
		out[i] = [2]string{k.name, k.env}
	}
	return out
}
