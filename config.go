package sandboxagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/configfile"
)

// Config is the library's configuration, loaded once (LoadConfig) and
// passed down. Precedence: environment > config file > built-in defaults.
// The command line reads a few more keys of the same file (engine
// selection, gateway, start queue): they are its own, not the library's
// (LoadConfig's programKeys).
type Config struct {
	// Timeouts by category; a call given no timeout uses its category.
	Timeouts Timeouts
	// Keepalive is how long a sandbox may sit idle (no command running)
	// before it stops and removes itself, even if the host process died.
	Keepalive time.Duration
	// MaxLifetime is the longest a sandbox lives, busy or not: a backstop
	// for an orphan whose keepalive something keeps renewing (0 = none).
	MaxLifetime time.Duration

	// ImageName replaces the repository part of every derived image tag
	// (for a private registry).
	ImageName string
	// ImagePolicy is what happens when a sandbox's image is not in the
	// engine (default catalog.PolicyPullOrBuild).
	ImagePolicy catalog.Policy
	// CACertFile names a PEM bundle that image builds and (when
	// TrustCACert is set) running sandboxes trust, for TLS-intercepting
	// proxies. Defaults to $SSL_CERT_FILE.
	CACertFile string
	// ImageVerify checks images against the digests recorded at release
	// (digests.json): catalog.VerifyOff (default) or catalog.VerifyStrict.
	ImageVerify catalog.Verify

	// Download caps: the archive that comes out of a container is hostile.
	MaxDownloadBytes   int64
	MaxDownloadEntries int
	MaxDownloadDepth   int
	// MaxOutputBytes caps what Exec captures of stdout and of stderr.
	MaxOutputBytes int64

	// Bounds on what one turn of an agent CLI may put on the host: the
	// CLI's output is written by the sandbox. Past any of them the turn
	// ends with ErrOutputLimit (see Limits).
	Limits Limits

	// Egress is the network policy of sandboxes that name none ("" = the
	// defaults: EgressModel for agents, EgressNone for bare sandboxes).
	Egress Egress
	// AllowHosts are reachable through the egress proxy (SandboxOptions).
	AllowHosts []string

	// PerTurn starts the agent CLI afresh for every turn even when its
	// driver has a long-lived mode (LongLived), which agents use by default.
	PerTurn bool

	// Audit trail of agent sessions.
	AuditEnabled       bool
	AuditRoot          string
	AuditRetentionDays int
}

// Limits bound what a sandbox's CLI output can cost the host per turn
// (memory, lines) and what its audit trail can take on disk. A line is
// also cut at 8 MiB whatever these say.
type Limits struct {
	TurnLines         int   // raw output lines of one turn
	TurnEvents        int   // events one turn keeps (TurnResult.Events, the audit)
	TurnEventBytes    int64 // bytes of text those events hold
	AuditTurnBytes    int64 // audit bytes one turn writes
	AuditSessionBytes int64 // audit bytes of one session's folder, all turns
	AuditDayBytes     int64 // audit bytes of one date folder, as this process sees it
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
		Keepalive:          time.Hour,
		MaxLifetime:        24 * time.Hour,
		ImagePolicy:        catalog.PolicyPullOrBuild,
		ImageVerify:        catalog.VerifyOff,
		MaxDownloadBytes:   1 << 30,
		MaxDownloadEntries: 100_000,
		MaxDownloadDepth:   64,
		MaxOutputBytes:     64 << 20,
		Limits: Limits{
			TurnLines:         200_000,
			TurnEvents:        50_000,
			TurnEventBytes:    64 << 20,
			AuditTurnBytes:    64 << 20,
			AuditSessionBytes: 512 << 20,
			AuditDayBytes:     4 << 30,
		},
		AuditEnabled:       true,
		AuditRoot:          filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-agent-%d", os.Getuid())),
		AuditRetentionDays: 7,
	}
}

// configKeys is the table of every library key; README documents the same
// table (together with the command line's keys).
var configKeys = []configfile.Key[Config]{
	configfile.Duration("timeout_start", func(c *Config) *time.Duration { return &c.Timeouts.Start }),
	configfile.Duration("timeout_exec", func(c *Config) *time.Duration { return &c.Timeouts.Exec }),
	configfile.Duration("timeout_ask", func(c *Config) *time.Duration { return &c.Timeouts.Ask }),
	configfile.Duration("timeout_copy", func(c *Config) *time.Duration { return &c.Timeouts.Copy }),
	configfile.Duration("keepalive", func(c *Config) *time.Duration { return &c.Keepalive }),
	configfile.Duration("max_lifetime", func(c *Config) *time.Duration { return &c.MaxLifetime }),
	configfile.String("image_name", "SANDBOX_AGENT_IMAGE_NAME", func(c *Config) *string { return &c.ImageName }),
	{Name: "image_policy", Env: "SANDBOX_AGENT_IMAGE_POLICY", Apply: func(c *Config, raw string) error {
		p, err := catalog.ParsePolicy(strings.TrimSpace(raw))
		c.ImagePolicy = p
		return invalidArgument(err)
	}},
	configfile.String("ca_cert_file", "SANDBOX_AGENT_CA_CERT_FILE", func(c *Config) *string { return &c.CACertFile }),
	{Name: "image_verify", Env: "SANDBOX_AGENT_IMAGE_VERIFY", Apply: func(c *Config, raw string) error {
		v, err := catalog.ParseVerify(strings.TrimSpace(raw))
		c.ImageVerify = v
		return invalidArgument(err)
	}},
	configfile.Int("max_download_bytes", 1, func(c *Config, n int64) { c.MaxDownloadBytes = n }),
	configfile.Int("max_download_entries", 1, func(c *Config, n int64) { c.MaxDownloadEntries = int(n) }),
	configfile.Int("max_download_depth", 1, func(c *Config, n int64) { c.MaxDownloadDepth = int(n) }),
	configfile.Int("max_output_bytes", 1, func(c *Config, n int64) { c.MaxOutputBytes = n }),
	configfile.Int("max_turn_lines", 1, func(c *Config, n int64) { c.Limits.TurnLines = int(n) }),
	configfile.Int("max_turn_events", 1, func(c *Config, n int64) { c.Limits.TurnEvents = int(n) }),
	configfile.Int("max_turn_event_bytes", 1, func(c *Config, n int64) { c.Limits.TurnEventBytes = n }),
	configfile.Int("max_audit_turn_bytes", 1, func(c *Config, n int64) { c.Limits.AuditTurnBytes = n }),
	configfile.Int("max_audit_session_bytes", 1, func(c *Config, n int64) { c.Limits.AuditSessionBytes = n }),
	configfile.Int("max_audit_day_bytes", 1, func(c *Config, n int64) { c.Limits.AuditDayBytes = n }),
	{Name: "egress", Env: "SANDBOX_AGENT_EGRESS", Apply: func(c *Config, raw string) error {
		e, err := ParseEgress(strings.TrimSpace(raw))
		c.Egress = e
		return err
	}},
	configfile.List("allow_hosts", "SANDBOX_AGENT_ALLOW_HOSTS", func(c *Config) *[]string { return &c.AllowHosts }, CheckAllowHosts),
	configfile.Bool("per_turn", "SANDBOX_AGENT_PER_TURN", func(c *Config) *bool { return &c.PerTurn }),
	configfile.Bool("audit", "SANDBOX_AGENT_AUDIT", func(c *Config) *bool { return &c.AuditEnabled }),
	configfile.String("audit_root", "SANDBOX_AGENT_AUDIT_ROOT", func(c *Config) *string { return &c.AuditRoot }),
	configfile.Int("audit_retention_days", 0, func(c *Config, n int64) { c.AuditRetentionDays = int(n) }),
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
// value, or a key of the file that is neither the library's nor one of
// programKeys (a program's own keys of the same file, which LoadConfig
// leaves alone: the command line passes its own), is a *ConfigError
// naming the key and where it came from.
func LoadConfig(path string, getenv func(string) string, programKeys ...string) (Config, error) {
	cfg := DefaultConfig()
	if v := getenv("SSL_CERT_FILE"); v != "" {
		cfg.CACertFile = v
	}
	if err := configfile.Load(&cfg, path, getenv, configKeys, programKeys); err != nil {
		return Config{}, asConfigError(err)
	}
	return cfg, nil
}

// asConfigError turns an error of the configuration file reader into a
// *ConfigError (other errors pass through).
func asConfigError(err error) error {
	var fe *configfile.Error
	if errors.As(err, &fe) {
		return &ConfigError{Key: fe.Key, Source: fe.Source, Err: fe.Err}
	}
	return err
}

// ConfigKeys lists every library configuration key with its environment
// variable, in documentation order.
func ConfigKeys() [][2]string {
	out := make([][2]string, len(configKeys))
	for i, k := range configKeys {
		out[i] = [2]string{k.Name, k.Env}
	}
	return out
}
