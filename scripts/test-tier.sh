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
# Extra arguments go to cargo (e.g. --no-run: build only).
#
# The selection is built first (timed on its own); then scripts/test-lanes.py runs the test
# binaries: each that carries a `lane: own` line in its crate documentation (the CLI's
# benchmark smoke tests) in a lane of its own, all others one after another in a shared lane,
# the lanes side by side; doc tests run beside them. Those with a `lane: alone` line (floods,
# millisecond timing of BIRD) run first, with nothing beside them. Output is kept in
# target/test-tier-TIER.log; the end prints how long the build and the run took, each lane's
# time and the test binaries that took longest, so that a slow CI run says where its time went.
# Arguments after `--` go to every test binary (name filters, --test-threads).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:?usage: scripts/test-tier.sh check|root [cargo args] [-- test args]}
shift
CARGO=${CARGO:-cargo}
cargo_args=() test_args=() build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; test_args=("$@"); break ;;
    --no-run) build_only=1 ;;  # the build below passes --no-run itself (cargo refuses it twice)
    *) cargo_args+=("$1") ;;
  esac
  shift
done

root=() pure=() names=() own=() alone=()
for f in crates/*/tests/*.rs crates/*/tests/*/main.rs; do
  # a test binary is a file tests/NAME.rs or a directory tests/NAME/ with a main.rs
  if [ "$(basename "$f")" = main.rs ]; then name=$(basename "$(dirname "$f")"); else name=$(basename "$f" .rs); fi
  names+=("$name")
  if grep -qE '^//! lane: own' "$f"; then own+=("$name"); fi
  if grep -qE '^//! lane: alone' "$f"; then alone+=("$name"); fi
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
: >"$log.times"
trap 'status=$?; cat "$log.times"; exit $status' EXIT
# timed LABEL CARGO-ARGS...: builds the tests those arguments select, then runs them in lanes
# (with the doc tests beside them when --doc is among the arguments), printing the seconds
# each phase took.
timed() {
  local label=$1 t0 t1 t2 doc=0 status=0 doc_status=0 args=() a
  shift
  for a in "$@"; do if [ "$a" = --doc ]; then doc=1; else args+=("$a"); fi; done
  t0=$(date +%s)
  $CARGO test "${args[@]}" --no-run --message-format=json-render-diagnostics >"$log.artifacts"
  t1=$(date +%s)
  if [ $build_only = 1 ]; then
    echo "test-tier $tier: $label built in $((t1 - t0)) s" | tee -a "$log.times"
    return 0
  fi
  if [ $doc = 1 ]; then
    # doc tests are built as they run; nothing else holds cargo's locks while the lanes run
    $CARGO test --workspace --profile tests --doc "${cargo_args[@]}" -- "${test_args[@]}" >"$log.doc" 2>&1 &
    doc_pid=$!
  fi
  python3 scripts/test-lanes.py "$log" "$log.artifacts" "$(IFS=,; echo "${own[*]}")" "$(IFS=,; echo "${alone[*]}")" -- "${test_args[@]}" || status=$?
  if [ $doc = 1 ]; then
    wait "$doc_pid" || doc_status=$?
    cat "$log.doc" | tee -a "$log"
    [ $doc_status = 0 ] || { echo "test-tier $tier: doc tests failed"; status=1; }
  fi
  t2=$(date +%s)
  echo "test-tier $tier: $label built in $((t1 - t0)) s, ran in $((t2 - t1)) s" | tee -a "$log.times"
  return $status
}

case "$tier" in
  check)
    timed "unit, integration and doc tests" --workspace --profile tests --lib --bins "${pure[@]}" --doc "${cargo_args[@]}"
    ;;
  root)
    if [ "$(id -u)" -ne 0 ]; then
      echo "test-tier: the root tier loads BPF programs and creates namespaces: run it as root" >&2
      exit 2
    fi
    timed "root tests" --workspace --profile tests "${root[@]}" "${cargo_args[@]}"
    ;;
  *)
    echo "usage: scripts/test-tier.sh check|root [cargo args] [-- test args]" >&2
    exit 2
    ;;
esac
