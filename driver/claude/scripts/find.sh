# shellcheck shell=sh
# Exits 3 (kit.ExitNoSession) when no project folder under
# ~/.claude/projects holds the transcript of session $1, else 0. Run by
# sh as the sandbox's user.
f=$(find "$HOME/.claude/projects" -mindepth 2 -maxdepth 2 -type f -name "$1.jsonl" 2>/dev/null | head -n 1)
[ -n "$f" ] || exit 3
