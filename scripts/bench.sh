#!/usr/bin/env bash
# Micro-benchmarks: runs every criterion benchmark in the workspace (`cargo bench --workspace`),
# then collects the estimates of this run into target/bench/micro.json and prints a table.
# Goals come from scripts/bench_goals.json. Benchmarks never fail on timing: a missed goal is
# reported, not an error. Extra arguments go to `cargo bench` (e.g. `scripts/bench.sh -- maglev`).
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p target/bench
# Only estimates written after this marker belong to this run (criterion keeps old results).
marker=target/bench/.run-started
touch "$marker"

cargo bench --workspace "$@"

python3 scripts/bench_collect.py \
  --criterion-dir target/criterion \
  --since "$marker" \
  --goals scripts/bench_goals.json \
  --out target/bench/micro.json

# System benchmarks of the binary (root: BPF_PROG_TEST_RUN, namespaces). Each prints its own
# table with ratios against baselines measured in the same run and writes target/bench/*.json.
cargo build --release -p stator
bin=target/release/stator
if [ "$(id -u)" -eq 0 ]; then
  "$bin" bench xdp --out target/bench/xdp.json
  "$bin" bench xdp --conntrack shared --out target/bench/xdp-shared.json
  # packets per second end to end on veth: forwarder vs plain forwarding, same run
  "$bin" bench veth --out target/bench/veth.json
  # the backend's decap program, and what second chance adds to it
  "$bin" bench decap --out target/bench/decap.json
else
  echo "bench.sh: skipping 'stator bench xdp', 'veth' and 'decap' (need root)" >&2
fi
# Upstream schedulers (no root): ns per pick, VNSWRR against nginx's SWRR, and the weight-change
# burst; pinned to one CPU, a few seconds.
"$bin" bench sched --out target/bench/sched.json
# The proxy tier (no root): wrk against Stator, nginx and HAProxy on loopback, same backends,
# same run; then 20 vs 2,000 backends with VNSWRR and SWRR. About two minutes.
"$bin" bench proxy --json > target/bench/proxy.json
# The paper's hashing evaluation, full size (Figures 11 and 12, build times): a few minutes.
"$bin" bench hashing --json-out target/bench/hashing.jsonl --csv target/bench/hashing.csv \
  --plot target/bench/hashing.png
