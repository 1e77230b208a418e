package sandboxagent

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/metering"
)

// Config is the library's configuration, loaded once (config.Load) and
// passed down. Precedence: environment > config file > built-in defaults.
// The command line reads a few more keys of the same file (engine
// selection, gateway, start queue): they are its own, not the library's
// (config.Load's programKeys).
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

	// DiskBytes is the disk limit of sandboxes that name none (0: the
	// default, 10 GiB where the engine can enforce it; negative:
	// none). See SandboxOptions.DiskBytes.
	DiskBytes int64

	// OCIRuntime is the OCI runtime of sandboxes that name none (""
	// = the engine's default, runc): "runsc" for gVisor on Docker, a
	// RuntimeClass name on Kubernetes (Podman: not offered). See
	// docs/security.md.
	OCIRuntime string

	// Prices turn the model proxy's token counts into dollars (a
	// TurnResult's Usage, dollar budgets): metering.DefaultPrices, with
	// the config key "prices" added or replacing.
	Prices metering.Prices

	// CheckpointMaxBytes caps a checkpoint (Agent.Checkpoint, Fork): the
	// committed layer, or the archived working directory and session.
	CheckpointMaxBytes int64
	// CheckpointRoot holds archived checkpoints (engines without commits:
	// Kubernetes), a folder of mode 0700.
	CheckpointRoot string

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
		Prices:             metering.DefaultPrices(),
		CheckpointMaxBytes: 4 << 30,
		CheckpointRoot:     defaultCheckpointRoot(),
		AuditEnabled:       true,
		AuditRoot:          filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-agent-%d", os.Getuid())),
		AuditRetentionDays: 7,
	}
}

// defaultCheckpointRoot is under the user's cache folder (it outlives
// reboots, unlike the audit's temporary one).
func defaultCheckpointRoot() string {
	dir, err := os.UserCacheDir()
	if err != nil { // no home: a folder of this user's alone, in the sticky temp folder
		return filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-agent-checkpoints-%d", os.Getuid()))
	}
	return filepath.Join(dir, "sandbox-agent", "checkpoints")
}
