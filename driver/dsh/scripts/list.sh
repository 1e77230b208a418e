# shellcheck shell=sh
# Prints a line "mtime<TAB>path<TAB>record" for every session log under
# $H/sessions ($H: $DSH_HOME; mtime as find's %T@): record is the log's
# last session/title event, "" when it has none. Run by sh as the
# sandbox's user.
[ -d "$H/sessions" ] || exit 0
find "$H/sessions" -mindepth 3 -maxdepth 3 -type f -name session.jsonl -printf '%T@\t%p\n' | while IFS="$(printf '\t')" read -r t p; do
  tl=$(grep -F '"type":"session/title"' "$p" | tail -n 1)
  printf '%s\t%s\t%s\n' "$t" "$p" "$tl"
done
