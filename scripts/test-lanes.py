#!/usr/bin/env python3
"""Runs built test binaries in parallel lanes (scripts/test-tier.sh calls it).

    test-lanes.py LOG ARTIFACTS-JSON OWN-LANE-NAMES ALONE-NAMES [-- LIBTEST-ARGS...]

ARTIFACTS-JSON is what `cargo test --no-run --message-format=json-render-diagnostics` printed
for the selection: one JSON object per line, the test executables among them. Every binary
named in OWN-LANE-NAMES (comma-separated; integration tests whose crate documentation says
`lane: own`) runs in a lane of its own; all the others run one after another in a shared lane;
the lanes run side by side. Binaries named in ALONE-NAMES (`lane: alone`: floods whose
premise is a node with the CPU to itself, tests that time a daemon to the millisecond) run
first, one at a time, with nothing beside them. Why: `cargo test` runs its binaries one at a
time and holds the artifact directory's lock while they run, so two `cargo test`s cannot
overlap, and some long binaries (the benchmark smoke runs) spend most of their time waiting on
timers with the CPUs idle. The whole labs stay in the shared lane: beside other binaries they
lost requests their tests assert are never lost (README, "make test").

Each binary runs as `cargo test` would run it: in its package's directory, with
CARGO_MANIFEST_DIR set, with LIBTEST-ARGS (test name filters, --test-threads …). Its output is
kept and printed whole when it ends (lanes never interleave lines) and appended to LOG. A
binary that runs longer than TEST_BINARY_TIMEOUT seconds (default 1800) is killed and fails.
Exit status 0 when every binary passed; else 1, after all have run, with the failures listed.
The end prints each lane's time and the slowest binaries.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time


def binaries(artifacts):
    """(name, label, executable, package directory) of each test executable, in cargo's order."""
    out = []
    with open(artifacts) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
                continue
            if not msg.get("profile", {}).get("test"):
                continue
            target = msg["target"]
            kind = target["kind"][0]
            # the same names libtest's summary and cargo use: a crate's unit tests by the crate
            name = target["name"].replace("-", "_")
            label = f"unittests {target['src_path']}" if kind in ("lib", "bin") else f"tests/{name}"
            out.append((name, label, msg["executable"], os.path.dirname(msg["manifest_path"])))
    return out


def main():
    args = sys.argv[1:]
    libtest = []
    if "--" in args:
        i = args.index("--")
        args, libtest = args[:i], args[i + 1 :]
    log_path, artifacts, own, alone = args
    own = {n for n in own.split(",") if n}
    alone = {n for n in alone.split(",") if n}
    timeout = float(os.environ.get("TEST_BINARY_TIMEOUT", "1800"))

    bins = binaries(artifacts)
    if not bins:
        print("test-lanes: no test executable in the build's output", file=sys.stderr)
        return 1
    first = [b for b in bins if b[0] in alone]
    lanes = [[b] for b in bins if b[0] in own and b[0] not in alone]
    shared = [b for b in bins if b[0] not in own and b[0] not in alone]
    if shared:
        lanes.append(shared)

    lock = threading.Lock()
    results = []  # (name, seconds, ok)
    lane_times = []
    procs = set()
    stopping = threading.Event()  # set when interrupted: no lane starts another binary
    log = open(log_path, "a")

    def run(b):
        name, label, exe, pkg_dir = b
        env = dict(os.environ, CARGO_MANIFEST_DIR=pkg_dir)
        with tempfile.TemporaryFile() as out:
            t0 = time.monotonic()
            p = subprocess.Popen(
                [exe, *libtest], cwd=pkg_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            with lock:
                procs.add(p)
                if stopping.is_set():
                    os.killpg(p.pid, signal.SIGKILL)
            try:
                rc = p.wait(timeout=timeout)
                note = ""
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
                note = f"test-lanes: {name} killed after {timeout:.0f} s\n"
            secs = time.monotonic() - t0
            with lock:
                procs.discard(p)
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
        with lock:
            block = f"     Running {label} ({exe})\n{text}{note}"
            if rc != 0 and not note:
                block += f"test-lanes: {name} exited with status {rc}\n"
            sys.stdout.write(block)
            sys.stdout.flush()
            log.write(block)
            log.flush()
            results.append((name, secs, rc == 0))

    def lane(bs):
        t0 = time.monotonic()
        for b in bs:
            run(b)
        with lock:
            what = ", ".join(b[0] for b in bs) if len(bs) < 4 else f"{len(bs)} binaries"
            lane_times.append((what, time.monotonic() - t0))

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGTERM or SIGHUP (CI cancelled, terminal closed) ends the run like Ctrl-C: every test
    # binary runs in a session of its own and would otherwise outlive this runner
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    threads = [threading.Thread(target=lane, args=(l,), daemon=True) for l in lanes]
    try:
        if first:
            lane(first)
        for t in threads:
            t.start()
        for t in threads:
            # join with a timeout, so that the main thread stays interruptible by a signal
            while t.is_alive():
                t.join(timeout=1)
    except KeyboardInterrupt:
        with lock:
            stopping.set()
            for p in procs:
                os.killpg(p.pid, signal.SIGKILL)
        print("test-lanes: interrupted; every running test binary killed", file=sys.stderr)
        return 130

    print("test-lanes: slowest test binaries:")
    for name, secs, ok in sorted(results, key=lambda r: -r[1])[:12]:
        print(f"{secs:8.1f} s  {name}{'' if ok else '  FAILED'}")
    for what, secs in lane_times:
        print(f"test-lanes: lane of {what}: {secs:.0f} s")
    failed = [r[0] for r in results if not r[2]]
    if failed:
        print("test-lanes: failed:", " ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
