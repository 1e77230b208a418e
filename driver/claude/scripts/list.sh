# shellcheck shell=sh
# Prints a line "mtime<TAB>path<TAB>record" for every transcript under
# ~/.claude/projects (mtime as find's %T@): record is the transcript's last
# last-prompt record or queued prompt (queue-operation enqueue), "" when it
# has none. Run by sh as the sandbox's user.
d="$HOME/.claude/projects"
[ -d "$d" ] || exit 0
find "$d" -mindepth 2 -maxdepth 2 -type f -name '*.jsonl' -printf '%T@\t%p\n' | while IFS="$(printf '\t')" read -r t p; do
  lp=$(grep -F -e '"type":"last-prompt"' -e '"operation":"enqueue"' "$p" | tail -n 1)
  printf '%s\t%s\t%s\n' "$t" "$p" "$lp"
done
