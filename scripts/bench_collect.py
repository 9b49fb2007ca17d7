#!/usr/bin/env python3
"""Collect criterion estimates into one JSON file and print a compact table.

Walks <criterion-dir>/**/new/estimates.json (criterion's point estimates, in nanoseconds),
names each benchmark by the `full_id` in the neighbouring benchmark.json, and compares the
median with the goal for that id in the goals file, if there is one. Generic: any crate's
criterion benches are picked up without changes here. Never fails because of a timing.
"""
import argparse
import json
import os
import sys


def human(ns):
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def collect(criterion_dir, since):
    results = []
    for root, _dirs, files in os.walk(criterion_dir):
        if os.path.basename(root) != "new" or "estimates.json" not in files:
            continue
        estimates_path = os.path.join(root, "estimates.json")
        if since is not None and os.path.getmtime(estimates_path) < since:
            continue
        with open(estimates_path) as f:
            estimates = json.load(f)
        bench_id = os.path.relpath(os.path.dirname(root), criterion_dir)
        meta_path = os.path.join(root, "benchmark.json")
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                bench_id = json.load(f).get("full_id", bench_id)
        results.append({
            "id": bench_id,
            "median_ns": estimates["median"]["point_estimate"],
            "mean_ns": estimates["mean"]["point_estimate"],
        })
    return sorted(results, key=lambda r: r["id"])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--criterion-dir", default="target/criterion")
    parser.add_argument("--since", help="only estimates newer than this file's mtime")
    parser.add_argument("--goals", help="JSON object: id -> {median_ns_max, note}")
    parser.add_argument("--out", default="target/bench/micro.json")
    args = parser.parse_args()

    since = os.path.getmtime(args.since) if args.since and os.path.exists(args.since) else None
    goals = {}
    if args.goals and os.path.exists(args.goals):
        with open(args.goals) as f:
            goals = {k: v for k, v in json.load(f).items() if not k.startswith("_")}

    results = collect(args.criterion_dir, since)
    for r in results:
        goal = goals.get(r["id"])
        if goal is None:
            continue
        r["goal_median_ns"] = goal["median_ns_max"]
        met = r["median_ns"] <= goal["median_ns_max"]
        r["status"] = "pass" if met else "miss"
        r["note"] = goal.get("note", "")

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")

    if not results:
        print(f"bench: no criterion estimates found under {args.criterion_dir}", file=sys.stderr)
        return 0
    width = max(len(r["id"]) for r in results)
    print(f"\n{'benchmark':<{width}}  {'median':>10}  {'mean':>10}  {'goal':>10}  status")
    for r in results:
        goal = human(r.get("goal_median_ns"))
        status = r.get("status", "")
        print(f"{r['id']:<{width}}  {human(r['median_ns']):>10}  {human(r['mean_ns']):>10}"
              f"  {goal:>10}  {status}")
    missed = [r["id"] for r in results if r.get("status") == "miss"]
    if missed:
        print(f"\nmissed goals (reported, not failed): {', '.join(missed)}")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
