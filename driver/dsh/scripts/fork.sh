# shellcheck shell=sh
# Copies the folder of session $1 ($H/sessions/<project>/$1, $H:
# $DSH_HOME) into the new session $2 beside it, with $2 as the id in its
# log's header (the first line, the only place a session names itself):
# the copy is made aside, its header rewritten, then published under its
# new name. Exits 3 (kit.ExitNoSession) when there is no session $1, 4
# (kit.ExitExists) when $2 exists. $1 and $2 are session-<uuid>. Run by sh
# as the sandbox's user.
f=""
for x in "$H/sessions"/*/"$1"/session.jsonl; do [ -f "$x" ] && f="$x" && break; done
[ -n "$f" ] || exit 3
set -e
dir=$(dirname -- "$f")
proj=$(dirname -- "$dir")
[ ! -e "$proj/$2" ] || exit 4
tmp="$proj/.$2.tmp"
rm -rf -- "$tmp"
cp -R -p -- "$dir" "$tmp"
{ head -n 1 -- "$f" | sed "s/\"id\":\"$1\"/\"id\":\"$2\"/"; tail -n +2 -- "$f"; } > "$tmp/session.jsonl"
head -n 1 -- "$tmp/session.jsonl" | grep -q "\"id\":\"$2\""
mv -- "$tmp" "$proj/$2"
