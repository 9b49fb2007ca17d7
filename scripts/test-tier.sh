#!/usr/bin/env bash
# Runs one tier of Stator's tests.
#
#   scripts/test-tier.sh check   every test that needs neither root nor the kernel: unit tests
#                                (#[test] in src/), doc tests, and each integration test binary
#                                (crates/*/tests/NAME.rs or crates/*/tests/NAME/main.rs) without
#                                a `tier: root` line
#   scripts/test-tier.sh root    the integration test binaries that carry a `tier: root` line in
#                                their crate documentation: BPF, namespaces, BIRD, the lab
#
# A test binary needing root says so with that line; one that does not must pass as an
# unprivileged user (`make check` is the proof). Unit tests in src/ never need root. Integration
# test names are unique across the workspace, so one cargo invocation can select them by name.
# Extra arguments go to cargo (e.g. --no-run).
#
# Each cargo invocation builds first (timed on its own), then runs with its output kept in
# target/test-tier-TIER.log; the end prints how long the build and the run took and the test
# binaries that took longest, so that a slow CI run says where its time went.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:?usage: scripts/test-tier.sh check|root [cargo args]}
shift
CARGO=${CARGO:-cargo}

root=() pure=() names=()
for f in crates/*/tests/*.rs crates/*/tests/*/main.rs; do
  # a test binary is a file tests/NAME.rs or a directory tests/NAME/ with a main.rs
  if [ "$(basename "$f")" = main.rs ]; then name=$(basename "$(dirname "$f")"); else name=$(basename "$f" .rs); fi
  names+=("$name")
  if grep -qE '^//! tier: root' "$f"; then root+=(--test "$name"); else pure+=(--test "$name"); fi
done
dups=$(printf '%s\n' "${names[@]}" | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "test-tier: integration test names must be unique across the workspace; repeated:" $dups >&2
  exit 2
fi

log=target/test-tier-$tier.log
mkdir -p target
: >"$log"
# timed LABEL CARGO-ARGS...: builds the tests those arguments select, then runs them (output
# to the terminal and the log), printing the seconds each phase took.
timed() {
  local label=$1 t0 t1 t2
  shift
  t0=$(date +%s)
  # doc tests are built as they run: there is nothing to build apart
  case " $* " in *" --doc "*) ;; *) $CARGO test "$@" --no-run ;; esac
  t1=$(date +%s)
  $CARGO test "$@" 2>&1 | tee -a "$log"
  t2=$(date +%s)
  echo "test-tier $tier: $label built in $((t1 - t0)) s, ran in $((t2 - t1)) s" | tee -a "$log.times"
}
# The slowest test binaries of the log, by the time libtest reports for each.
slowest() {
  # `Running tests/x/main.rs (target/tests/deps/x-HASH)` or `Running unittests src/lib.rs
  # (target/tests/deps/crate-HASH)`: the binary's name without its hash says which it was
  awk '/^ *Running / { name = $NF; gsub(/[()]/, "", name); sub(/.*\//, "", name); sub(/-[0-9a-f]+$/, "", name) }
       /^ *Doc-tests / { name = "doc-tests " $2 }
       /^test result:/ { t = $NF; sub(/s$/, "", t); printf "%8.1f s  %s\n", t, name }' "$log" |
    sort -rn | head -n 12
}
: >"$log.times"
trap 'status=$?; echo "test-tier $tier: slowest test binaries:"; slowest; cat "$log.times"; exit $status' EXIT

case "$tier" in
  check)
    timed "unit and integration tests" --workspace --profile tests --no-fail-fast --lib --bins "${pure[@]}" "$@"
    timed "doc tests" --workspace --profile tests --doc "$@"
    ;;
  root)
    if [ "$(id -u)" -ne 0 ]; then
      echo "test-tier: the root tier loads BPF programs and creates namespaces: run it as root" >&2
      exit 2
    fi
    timed "root tests" --workspace --profile tests --no-fail-fast "${root[@]}" "$@"
    ;;
  *)
    echo "usage: scripts/test-tier.sh check|root [cargo args]" >&2
    exit 2
    ;;
esac
