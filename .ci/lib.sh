# shellcheck shell=bash
# Helpers the .ci scripts share. Source it; it defines functions only.

log() { printf '==> %s\n' "$*" >&2; }

# need_pkgs CMD:PACKAGE...: install (apt-get, Debian/Ubuntu) the packages
# whose command is missing, so every script works on a bare machine.
need_pkgs() {
  local want=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || want+=("${pair#*:}")
  done
  [ ${#want[@]} -eq 0 ] && return 0
  apt_install "${want[@]}"
}

# apt_install PACKAGE...: install Debian packages (root and apt-get).
apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "missing: $* (install them; automatic install needs root and apt-get)" >&2
    return 1
  fi
  log "installing Debian's $*"
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists once per boot of this script family: a bare
  # machine has none, and an old list may name versions the mirror dropped.
  if [ -z "${SANDBOX_AGENT_APT_UPDATED:-}" ]; then
    apt-get update -q >/dev/null
    export SANDBOX_AGENT_APT_UPDATED=1
  fi
  apt-get install -y -q "$@" >/dev/null
}
