# shellcheck shell=sh
# Prints the uid and the gid the exec runs as, one a line. Run by sh.
id -u; id -g
