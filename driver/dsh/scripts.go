package dsh

import _ "embed"

// The session scripts run in the sandbox (kit.Shell, as its user, with $H
// set to $DSH_HOME) live in scripts/, one file each, so shellcheck lints
// them (.ci/run); each says what its arguments are. They are the text of
// an "sh -c" argument: ids reach them as arguments, never spliced into the
// text.

// findScript exits kit.ExitNoSession unless session $1 exists.
//
//go:embed scripts/find.sh
var findScript string

// forkScript copies session $1's folder into the new session $2.
//
//go:embed scripts/fork.sh
var forkScript string

// listScript prints "mtime<TAB>path<TAB>title record" for every log.
//
//go:embed scripts/list.sh
var listScript string

// deleteScript removes session $1's folder.
//
//go:embed scripts/delete.sh
var deleteScript string

// dumpScript prints session $1's log path and its folder's other files.
//
//go:embed scripts/dump.sh
var dumpScript string
