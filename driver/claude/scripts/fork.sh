# shellcheck shell=sh
# Copies session $1 (its transcript ~/.claude/projects/<project>/$1.jsonl,
# with every $1 replaced by $2, and its folder, if any) into the new
# session $2 beside it; the transcript last, so that a half-made copy is
# not resumable. Exits 3 (kit.ExitNoSession) when there is no session $1,
# 4 (kit.ExitExists) when $2 exists. $1 and $2 are UUIDs. Run by sh as the
# sandbox's user.
f=$(find "$HOME/.claude/projects" -mindepth 2 -maxdepth 2 -type f -name "$1.jsonl" 2>/dev/null | head -n 1)
[ -n "$f" ] || exit 3
set -e
dir=$(dirname -- "$f")
[ ! -e "$dir/$2.jsonl" ] || exit 4
sed "s/$1/$2/g" "$f" > "$dir/$2.jsonl.tmp"
if [ -d "$dir/$1" ]; then cp -R -- "$dir/$1" "$dir/$2"; fi
mv -f -- "$dir/$2.jsonl.tmp" "$dir/$2.jsonl"
