# shellcheck shell=sh
# Deletes thread $1 (a UUID) with `codex delete --force`; a thread codex's
# index does not know (loaded from a dump) has its rollout files under
# $H/sessions removed instead, unless a fork depends on it (exit 3, the
# forks named on stderr). Exits 1 with codex's error when there was
# nothing to remove. Run by sh as the sandbox's user.
id="$1"
if err=$(codex delete --force "$id" 2>&1 >/dev/null); then exit 0; fi
dep=$(find "$H/sessions" -type f -name 'rollout-*.jsonl' ! -name "*-$id.jsonl" -exec grep -l -F "\"forked_from_id\":\"$id\"" {} +)
if [ -n "$dep" ]; then echo "forks depend on it: $dep" >&2; exit 3; fi
n=$(find "$H/sessions" -type f -name "rollout-*-$id.jsonl" -print -delete | wc -l)
if [ "$n" -eq 0 ]; then echo "$err" >&2; exit 1; fi
