# shellcheck shell=sh
# Removes the folder of session $1 ($H/sessions/<project>/$1, $H:
# $DSH_HOME); exits 3 (kit.ExitNoSession) when there is none. Run by sh as
# the sandbox's user.
f=""
for x in "$H/sessions"/*/"$1"/session.jsonl; do [ -f "$x" ] && f="$x" && break; done
[ -n "$f" ] || exit 3
rm -rf -- "$(dirname -- "$f")"
