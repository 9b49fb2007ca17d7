#!/bin/sh
# Sets up who may use a Stator node's admin API (docs/operations.md, "Who can do what"):
#   - the system group `stator`: its members may use the Unix socket /run/stator/api.sock;
#   - SYSCONFDIR/stator/api-token: an admin token (32 random bytes in hex), mode 0600, root,
#     for api.token_file when the TCP endpoint (api.listen) is turned on;
#   - SYSCONFDIR/stator/stator.toml as shipped (root, mode 0640): given the group stator, so
#     operators may `stator check` it and other users may not read it (a file an operator
#     has changed the owner or mode of is left as it is).
# Idempotent: an existing group or token is kept. Run as root by `make install` and by the
# Debian package's postinst.
#
#   scripts/access-setup.sh [SYSCONFDIR]     (default /etc)
set -eu
etc=${1:-/etc}
if ! getent group stator >/dev/null 2>&1; then
  groupadd --system stator
  echo "stator: created the group stator (members may use the admin API's socket)"
fi
install -d -m 0755 "$etc/stator"
token="$etc/stator/api-token"
if [ ! -e "$token" ]; then
  umask 077
  od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$token"
  echo >> "$token"
  chmod 0600 "$token"
  echo "stator: created $token (admin token for api.token_file, readable by root only)"
fi
conf="$etc/stator/stator.toml"
if [ -e "$conf" ] && [ "$(stat -c %G:%a "$conf")" = root:640 ]; then
  chgrp stator "$conf"
fi
