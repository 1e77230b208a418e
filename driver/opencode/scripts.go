package opencode

import _ "embed"

// The scripts run in the sandbox live in scripts/, one file each, so
// shellcheck lints them (.ci/run); each says what its arguments are. They
// are the text of an "sh -c" argument: ids reach them as arguments and
// secrets through the environment, never spliced into the text.

// forkScript forks session $1 through a short-lived `opencode serve` and
// prints the new session as JSON.
//
//go:embed scripts/fork.sh
var forkScript string
