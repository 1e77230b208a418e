# shellcheck shell=sh
# Prints the path of the session file whose header (its first line) has
# the id $1, under ~/.pi/agent/sessions/<project>/; exits 3
# (kit.ExitNoSession) when there is none. $1 is a UUID. Run by sh as the
# sandbox's user.
f=
for g in "$HOME/.pi/agent/sessions"/*/*.jsonl; do
  [ -f "$g" ] || continue
  if head -n 1 -- "$g" | grep -qF "\"id\":\"$1\""; then f=$g; break; fi
done
[ -n "$f" ] || exit 3
printf '%s' "$f"
