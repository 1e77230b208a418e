# shellcheck shell=sh
# Forks opencode session $1 through opencode's server API: starts
# `opencode serve` on a loopback port (--port 0: 4096, or a random free
# port when 4096 is taken), waits up to 3 minutes for it to listen, POSTs
# /session/$1/fork with the password $OPENCODE_SERVER_PASSWORD (from the
# environment), prints the new session as JSON and stops the server. Exits
# 3 when the server does not start, 4 when the request fails, 5 on an
# HTTP status other than 200 (the answer on stderr). Run by sh as the
# sandbox's user.
set -u
log=$(mktemp); out=$(mktemp)
opencode serve --hostname 127.0.0.1 --port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log" "$out"' EXIT
url=
i=0
while [ $i -lt 1800 ]; do
  url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$url" ] && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 3; }
  sleep 0.1; i=$((i+1))
done
[ -n "$url" ] || { echo "opencode serve did not start" >&2; cat "$log" >&2; exit 3; }
code=$(curl -sS -o "$out" -w '%{http_code}' -u "opencode:$OPENCODE_SERVER_PASSWORD" -X POST \
  -H 'content-type: application/json' -d '{}' "$url/session/$1/fork") || { echo "fork request failed" >&2; exit 4; }
if [ "$code" != 200 ]; then echo "fork: HTTP $code: $(head -c 2000 "$out")" >&2; exit 5; fi
cat "$out"
