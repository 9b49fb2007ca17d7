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
