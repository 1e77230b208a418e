package codex

import _ "embed"

// The scripts run in the sandbox (kit.Shell, as its user, with $H set to
// codex's home) live in scripts/, one file each, so shellcheck lints them
// (.ci/run); each says what its arguments are. They are the text of an
// "sh -c" argument: ids and patterns reach them as arguments, never
// spliced into the text.

// rolloutsScript prints $H, then "mtime path" for every rollout matching
// the pattern $1.
//
//go:embed scripts/rollouts.sh
var rolloutsScript string

// deleteScript deletes thread $1 (codex delete, else its rollouts).
//
//go:embed scripts/delete.sh
var deleteScript string
