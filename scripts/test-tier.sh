#!/usr/bin/env bash
# Runs one tier of Stator's tests.
#
#   scripts/test-tier.sh check   every test that needs neither root nor the kernel: unit tests
#                                (#[test] in src/), doc tests, and each integration test file
#                                (crates/*/tests/*.rs) without a `tier: root` line
#   scripts/test-tier.sh root    the integration test files that carry a `tier: root` line in
#                                their module documentation: BPF, namespaces, BIRD, the lab
#
# A test file needing root says so with that line; one that does not must pass as an
# unprivileged user (`make check` is the proof). Unit tests in src/ never need root. Integration
# test names are unique across the workspace, so one cargo invocation can select them by name.
# Extra arguments go to cargo (e.g. --no-run).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:?usage: scripts/test-tier.sh check|root [cargo args]}
shift
CARGO=${CARGO:-cargo}

root=() pure=() names=()
for f in crates/*/tests/*.rs; do
  name=$(basename "$f" .rs)
  names+=("$name")
  if grep -qE '^//! tier: root' "$f"; then root+=(--test "$name"); else pure+=(--test "$name"); fi
done
dups=$(printf '%s\n' "${names[@]}" | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "test-tier: integration test names must be unique across the workspace; repeated:" $dups >&2
  exit 2
fi

case "$tier" in
  check)
    $CARGO test --workspace --profile tests --no-fail-fast --lib --bins "${pure[@]}" "$@"
    $CARGO test --workspace --profile tests --doc "$@"
    ;;
  root)
    if [ "$(id -u)" -ne 0 ]; then
      echo "test-tier: the root tier loads BPF programs and creates namespaces: run it as root" >&2
      exit 2
    fi
    $CARGO test --workspace --profile tests --no-fail-fast "${root[@]}" "$@"
    ;;
  *)
    echo "usage: scripts/test-tier.sh check|root [cargo args]" >&2
    exit 2
    ;;
esac
