#!/usr/bin/env bash
# Builds a Debian package of Stator from the workspace with dpkg-deb (no extra tools): the
# tree scripts/install.sh stages with PREFIX=/usr, plus DEBIAN/ (control with the shared
# libraries' dependencies from dpkg-shlibdeps, conffiles, maintainer scripts, md5sums).
#
#   STATOR_BIN  the binary to package (default target/release/stator; `make deb` builds it)
#   OUT         where the .deb goes (default target/deb)
#   DEB_COMPRESSION  dpkg-deb's -Z: xz (the default, as Debian ships), gzip, zstd or none
#               (the packaging test uses none: xz of the binary takes ~20 s of its ~21)
#
# Prints the package's path. The service is installed, not enabled or started: the
# configuration must be edited first (postinst says so).
set -euo pipefail
cd "$(dirname "$0")/.."
STATOR_BIN=$(realpath "${STATOR_BIN:-target/release/stator}")
OUT=${OUT:-target/deb}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
stage=$(mktemp -d "$OUT/stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"

# `stator 0.1.0 (commit f2e8506d2c91, 2025-11-25)` -> 0.1.0+git20251125.f2e8506d2c91
line=$("$STATOR_BIN" --version)
upstream=$(echo "$line" | awk '{print $2}')
commit=$(echo "$line" | sed -n 's/.*(commit \([0-9a-f]\{7,\}\).*/\1/p')
date=$(echo "$line" | sed -n 's/.*, \([0-9]\{4\}\)-\([0-9]\{2\}\)-\([0-9]\{2\}\)).*/\1\2\3/p')
version=$upstream
[ -n "$commit" ] && version="$upstream+git${date:+$date.}$commit"
arch=$(dpkg --print-architecture)

DESTDIR=$stage PREFIX=/usr SYSCONFDIR=/etc UNITDIR=/usr/lib/systemd/system STATOR_BIN=$STATOR_BIN \
  scripts/install.sh >/dev/null
install -D -m 0755 scripts/access-setup.sh "$stage/usr/share/stator/access-setup.sh"
# As dh_strip does: no debug information in the package (the release profile keeps some).
strip --strip-debug --remove-section=.comment --remove-section=.note "$stage/usr/bin/stator"

# Shared-library dependencies, as dpkg-shlibdeps computes them (it wants a debian/control).
shl=$(mktemp -d)
mkdir -p "$shl/debian"
printf 'Source: stator\n\nPackage: stator\nArchitecture: any\n' > "$shl/debian/control"
depends=$(cd "$shl" && dpkg-shlibdeps -O -e "$stage/usr/bin/stator" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
rm -rf "$shl"
[ -n "$depends" ] || { echo "deb: dpkg-shlibdeps found no dependencies (is dpkg-dev installed?)" >&2; exit 1; }

mkdir -p "$stage/DEBIAN"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: stator
Version: $version
Architecture: $arch
Maintainer: Stator developers <stator@example.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends
Recommends: bird2, ca-certificates
Suggests: prometheus
Section: net
Priority: optional
Homepage: https://example.invalid/stator
Description: Maglev-style network load balancer (XDP, consistent hashing, BGP)
 Stator matches packets to virtual IPs in an XDP program, picks a backend with
 Maglev consistent hashing and connection tracking, and encapsulates the packet
 (GRE, IPIP or GUE) to it; backends answer clients directly. Each node health
 checks its backends (TCP, HTTP, HTTPS, UDP) and announces its VIPs over BGP
 through BIRD while it can serve them.
 .
 This package installs the stator binary, the stator.service systemd unit
 (a load-balancer or proxy node), the stator-decap.service unit (a backend:
 decapsulation and the VIPs on lo), /etc/stator/stator.toml and
 /etc/stator/decap.env (starting points to edit), shell completions, man
 pages and the documentation. Neither service is started until enabled.
CONTROL
printf '/etc/stator/stator.toml\n/etc/stator/decap.env\n' > "$stage/DEBIAN/conffiles"
cat > "$stage/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  # The group stator (the admin API's socket) and the root-only admin token.
  /usr/share/stator/access-setup.sh /etc
  if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
  if [ -z "$2" ]; then
    echo "stator: edit /etc/stator/stator.toml (stator check /etc/stator/stator.toml), then: systemctl enable --now stator"
    echo "stator: on a backend, edit /etc/stator/decap.env instead, then: systemctl enable --now stator-decap"
  elif [ -d /run/systemd/system ] && systemctl is-active --quiet stator.service; then
    # An upgrade of a running node: the new binary takes over its sockets; no VIP is
    # withdrawn, no connection closed (docs/operations.md, "Upgrades").
    if /usr/bin/stator check /etc/stator/stator.toml >/dev/null 2>&1 && /usr/bin/stator upgrade; then
      :
    else
      echo "stator: the running node was not upgraded (see: journalctl -u stator); it runs the previous binary: systemctl restart stator when ready"
    fi
  fi
fi
exit 0
SCRIPT
cat > "$stage/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
# On removal only: on an upgrade postinst hands the running node over to the new binary.
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl stop stator.service stator-decap.service >/dev/null 2>&1 || true
  systemctl disable stator.service stator-decap.service >/dev/null 2>&1 || true
fi
exit 0
SCRIPT
cat > "$stage/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
exit 0
SCRIPT
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
  > "$stage/DEBIAN/md5sums"

deb="$OUT/stator_${version}_${arch}.deb"
dpkg-deb --root-owner-group "-Z${DEB_COMPRESSION:-xz}" --build "$stage" "$deb" >/dev/null
echo "$deb"
