# shellcheck shell=sh
# Prints the path of session $1's log, then the other files of its folder
# (relative to it), one a line; exits 3 (kit.ExitNoSession) when there is
# no session $1. $H is $DSH_HOME. Run by sh as the sandbox's user.
f=""
for x in "$H/sessions"/*/"$1"/session.jsonl; do [ -f "$x" ] && f="$x" && break; done
[ -n "$f" ] || exit 3
printf '%s\n' "$f"
find "$(dirname -- "$f")" -type f ! -name session.jsonl -printf '%P\n'
