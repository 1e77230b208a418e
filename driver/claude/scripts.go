package claude

import _ "embed"

// The session scripts run in the sandbox (kit.Shell, as its user) live in
// scripts/, one file each, so shellcheck lints them (.ci/run); each says
// what its arguments are. They are the text of an "sh -c" argument: ids
// and paths reach them as arguments, never spliced into the text.

// findScript exits kit.ExitNoSession unless session $1 exists.
//
//go:embed scripts/find.sh
var findScript string

// forkScript copies session $1 into the new session $2.
//
//go:embed scripts/fork.sh
var forkScript string

// listScript prints "mtime<TAB>path<TAB>record" for every transcript.
//
//go:embed scripts/list.sh
var listScript string

// deleteScript removes session $1's transcript, folder and session-env.
//
//go:embed scripts/delete.sh
var deleteScript string

// dumpScript prints session $1's transcript path and its folder's files.
//
//go:embed scripts/dump.sh
var dumpScript string
