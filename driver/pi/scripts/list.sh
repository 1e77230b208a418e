# shellcheck shell=sh
# Prints, for every session file under ~/.pi/agent/sessions/<project>/:
# "F<TAB>path<TAB>mtime" (mtime in seconds), its header as "H<TAB>json"
# and its first user message as "U<TAB>json" (each at most 64 KiB). Run
# by sh as the sandbox's user.
for f in "$HOME/.pi/agent/sessions"/*/*.jsonl; do
  [ -f "$f" ] || continue
  printf 'F\t%s\t%s\n' "$f" "$(stat -c %Y -- "$f")"
  head -n 1 -- "$f" | head -c 65536 | sed 's/^/H\t/'; echo
  grep -m 1 '"role":"user"' -- "$f" | head -c 65536 | sed 's/^/U\t/'; echo
done
