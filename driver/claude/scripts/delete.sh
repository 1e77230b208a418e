# shellcheck shell=sh
# Removes session $1: its transcript and folder in every project folder of
# ~/.claude/projects, and ~/.claude/session-env/$1. Exits 3
# (kit.ExitNoSession) when there was no transcript. $1 is a UUID. Run by sh
# as the sandbox's user.
found=0
for f in "$HOME/.claude/projects"/*/"$1.jsonl"; do
  [ -f "$f" ] || continue
  found=1
  rm -rf -- "$f" "${f%.jsonl}" || exit 1
done
rm -rf -- "$HOME/.claude/session-env/$1"
[ "$found" = 1 ] || exit 3
