# shellcheck shell=sh
# Prints $H (codex's home, $CODEX_HOME or ~/.codex), then a line
# "mtime path" for every rollout file under $H/sessions whose name matches
# the find pattern $1 (mtime as find's %T@, path relative to
# $H/sessions). Run by sh as the sandbox's user.
printf '%s\n' "$H"
[ -d "$H/sessions" ] || exit 0
find "$H/sessions" -type f -name "$1" -printf '%T@ %P\n'
