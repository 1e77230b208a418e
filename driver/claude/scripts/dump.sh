# shellcheck shell=sh
# Prints the path of session $1's transcript, then the paths of the files
# of its folder (relative to it), one a line; exits 3 (kit.ExitNoSession)
# when there is no session $1. Run by sh as the sandbox's user.
f=$(find "$HOME/.claude/projects" -mindepth 2 -maxdepth 2 -type f -name "$1.jsonl" 2>/dev/null | head -n 1)
[ -n "$f" ] || exit 3
printf '%s\n' "$f"
dir="${f%.jsonl}"
if [ -d "$dir" ]; then find "$dir" -type f -printf '%P\n'; fi
