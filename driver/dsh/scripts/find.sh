# shellcheck shell=sh
# Exits 3 (kit.ExitNoSession) when no project folder of $H/sessions ($H:
# $DSH_HOME) holds session $1's log, else 0. Run by sh as the sandbox's
# user.
f=""
for x in "$H/sessions"/*/"$1"/session.jsonl; do [ -f "$x" ] && f="$x" && break; done
[ -n "$f" ] || exit 3
