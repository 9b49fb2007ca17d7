#!/usr/bin/env bash
# The root tier of the tests with every CPU of the machine kept busy: a test that passes on
# an idle machine but leans on timing (a race between parallel tests, a wait too short for a
# loaded scheduler) fails here first, as it would some day in CI.
#
#   scripts/test-stress.sh [cargo args]     (make test-stress runs it after make check)
#
# One busy loop per CPU (`nproc`), at normal priority, for as long as the tests run and at
# most STRESS_LIMIT seconds (default 3600); the loops are killed when the tests end, however
# they end. Extra arguments go to the root tier (e.g. --test labs -- lab_e2e::).
#
# STRESS_LOAD, if set, is a command run in place of each busy loop — one that keeps a CPU busy
# just as well and does something useful meanwhile, such as a fuzz target:
#   STRESS_LOAD='fuzz/target/.../config CORPUS -max_total_time=3600' scripts/test-stress.sh
# It runs the same way (one per CPU, normal priority, under the same limit, killed with the
# tests); `{n}` in it is replaced by the instance's number (1..nproc), for log files.
set -euo pipefail
cd "$(dirname "$0")/.."
cpus=$(nproc)
limit=${STRESS_LIMIT:-3600}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
load=${STRESS_LOAD:-while :; do :; done}
for n in $(seq "$cpus"); do
  # timeout runs the load in a process group of its own and, killed, kills that whole group
  timeout "$limit" sh -c "${load//\{n\}/$n}" &
  pids+=($!)
done
echo "test-stress: $cpus × '${load}' running (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
started=$(date +%s)
status=0
./scripts/test-tier.sh root "$@" || status=$?
echo "test-stress: root tier finished with status $status in $(( $(date +%s) - started )) s under $cpus busy loop(s); load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
