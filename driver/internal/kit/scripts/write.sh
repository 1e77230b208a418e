# shellcheck shell=sh
# Writes stdin to $H/$1 atomically (a temporary file beside it, renamed),
# with mode $2 (octal), creating its missing parent folders, under umask
# $3 when $3 is not empty. $H is the driver's folder (kit.Shell's
# prelude). Run by sh as the sandbox's user.
set -e
f="$H/$1"
d=$(dirname -- "$f")
[ -d "$d" ] || ( [ -z "$3" ] || umask "$3"; mkdir -p -- "$d" )
tmp="$f.tmp.$$"
cat > "$tmp"
chmod "$2" "$tmp"
mv -f -- "$tmp" "$f"
