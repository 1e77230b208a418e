package pi

import _ "embed"

// The session scripts run in the sandbox (kit.Shell, as its user) live in
// scripts/, one file each, so shellcheck lints them (.ci/run); each says
// what its arguments are. They are the text of an "sh -c" argument: ids
// reach them as arguments, never spliced into the text.

// findScript prints the path of session $1's file, or exits
// kit.ExitNoSession.
//
//go:embed scripts/find.sh
var findScript string

// deleteScript removes session $1's file.
//
//go:embed scripts/delete.sh
var deleteScript string

// listScript prints "F", "H" and "U" lines for every session file.
//
//go:embed scripts/list.sh
var listScript string
