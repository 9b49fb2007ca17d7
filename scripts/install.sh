#!/usr/bin/env bash
# Installs Stator like a system service: the binary, the systemd units (stator.service for a
# node, stator-decap.service for a backend), the configuration and the backend's
# /etc/stator/decap.env (each only if there is none), shell completions, man pages and the
# documentation.
#
#   DESTDIR     staging root (packages); empty for a real install
#   PREFIX      /usr/local         BINDIR   $PREFIX/bin
#   SYSCONFDIR  /etc               UNITDIR  $PREFIX/lib/systemd/system
#   MANDIR      $PREFIX/share/man  DOCDIR   $PREFIX/share/doc/stator
#   STATOR_BIN  target/release/stator (built by `make build`)
#
# `make install` and `make deb` (scripts/deb.sh) call it. The configuration is
# examples/minimal.toml with dataplane.on_exit = "keep" (a service restart keeps the data
# plane forwarding); an existing one is never overwritten. Installed for real (no DESTDIR, as
# root), it also creates the group `stator` (who may use the admin API's socket) and
# /etc/stator/api-token (32 random bytes in hex, mode 0600, root: for api.token_file when the
# TCP endpoint is turned on); the Debian package does that in its postinst instead.
set -euo pipefail
cd "$(dirname "$0")/.."
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
BINDIR=${BINDIR:-$PREFIX/bin}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}
MANDIR=${MANDIR:-$PREFIX/share/man}
DOCDIR=${DOCDIR:-$PREFIX/share/doc/stator}
DATADIR=${DATADIR:-$PREFIX/share}
STATOR_BIN=${STATOR_BIN:-target/release/stator}

[ -x "$STATOR_BIN" ] || { echo "install: $STATOR_BIN not found (make build)" >&2; exit 1; }
root=$DESTDIR
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT

install -D -m 0755 "$STATOR_BIN" "$root$BINDIR/stator"

sed -e "s|@BINDIR@|$BINDIR|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" -e "s|@DOCDIR@|$DOCDIR|g" \
  packaging/stator.service.in > "$gen/stator.service"
install -D -m 0644 "$gen/stator.service" "$root$UNITDIR/stator.service"
sed -e "s|@BINDIR@|$BINDIR|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" -e "s|@DOCDIR@|$DOCDIR|g" \
  packaging/stator-decap.service.in > "$gen/stator-decap.service"
install -D -m 0644 "$gen/stator-decap.service" "$root$UNITDIR/stator-decap.service"

conf="$root$SYSCONFDIR/stator/stator.toml"
if [ -e "$conf" ]; then
  echo "install: keeping the existing $SYSCONFDIR/stator/stator.toml"
else
  {
    echo "# /etc/stator/stator.toml — edit for this node, check with \`stator check $SYSCONFDIR/stator/stator.toml\`,"
    echo "# then \`systemctl enable --now stator\`. Every key: $DOCDIR/config.md"
    echo "#"
    sed -e 's|^interfaces = \["eth0"\]$|interfaces = ["eth0"]\non_exit = "keep"                # systemctl restart keeps the XDP program forwarding|' \
      examples/minimal.toml
  } > "$gen/stator.toml"
  grep -q '^on_exit = "keep"' "$gen/stator.toml" || { echo "install: examples/minimal.toml changed shape" >&2; exit 1; }
  install -D -m 0640 "$gen/stator.toml" "$conf"
fi

decap_env="$root$SYSCONFDIR/stator/decap.env"
if [ -e "$decap_env" ]; then
  echo "install: keeping the existing $SYSCONFDIR/stator/decap.env"
else
  install -D -m 0644 packaging/decap.env "$decap_env"
fi

if [ -z "$DESTDIR" ] && [ "$(id -u)" -eq 0 ]; then
  scripts/access-setup.sh "$SYSCONFDIR"
fi

"$STATOR_BIN" generate completions --shell bash --out "$gen" >/dev/null
"$STATOR_BIN" generate completions --shell zsh --out "$gen" >/dev/null
"$STATOR_BIN" generate completions --shell fish --out "$gen" >/dev/null
install -D -m 0644 "$gen/stator.bash" "$root$DATADIR/bash-completion/completions/stator"
install -D -m 0644 "$gen/_stator" "$root$DATADIR/zsh/vendor-completions/_stator"
install -D -m 0644 "$gen/stator.fish" "$root$DATADIR/fish/vendor_completions.d/stator.fish"

"$STATOR_BIN" generate man --out "$gen/man" >/dev/null
for page in "$gen"/man/*.1; do
  gzip -9n "$page"
  install -D -m 0644 "$page.gz" "$root$MANDIR/man1/$(basename "$page").gz"
done

install -d "$root$DOCDIR/examples"
install -m 0644 README.md docs/*.md "$root$DOCDIR/"
install -m 0644 examples/* "$root$DOCDIR/examples/"

echo "installed stator $("$STATOR_BIN" --version | cut -d' ' -f2-) into ${DESTDIR:-/} (prefix $PREFIX)"
