//! A host with no bpffs mounted, as a freshly provisioned machine is: `stator xdp attach` must
//! mount one itself and work, and `stator bench veth --quick` must work too — it pins on a
//! bpffs of its own under the temp directory and leaves no mount behind (issue: a fresh
//! machine failed `make test` because nothing mounted `/sys/fs/bpf`). The second test is also
//! the benchmark's smoke test: it asserts numbers exist, never their size.
//!
//! Each command runs in a mount namespace of its own in which `/sys/fs/bpf` is not a bpffs:
//! `ip netns exec` mounts a fresh sysfs on `/sys` (so the host's bpffs, if any, is hidden), and
//! `unshare --mount` + `umount` does the same for the benchmark, which makes its own network
//! namespaces. Nothing escapes to the host: the mounts die with those namespaces.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

use std::process::{Command, Output};

use stator_lab::netns::{self, Netns};

fn stator() -> &'static str {
    env!("CARGO_BIN_EXE_stator")
}

fn sh(mut cmd: Command) -> Output {
    let out = cmd.output().expect("run the shell");
    let text = format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn xdp_attach_mounts_a_bpffs_where_none_is() {
    assert!(
        stator_xdp::is_root(),
        "this test creates a network namespace and loads XDP: run as root"
    );
    let name = format!("sfh{}", std::process::id());
    let _ = netns::cleanup(&name);
    let a = Netns::create(&format!("{name}a")).unwrap();
    let b = Netns::create(&format!("{name}b")).unwrap();
    netns::veth(&a, "fh0", &b, "fh1").unwrap();
    // One shell, one mount namespace: attach, look, detach. The bpffs the first command mounts
    // must be the one the later commands find (mounted once, never mounted over).
    let script = format!(
        "set -e
         if [ \"$(stat -f -c %T /sys/fs/bpf)\" = bpf_fs ]; then echo 'bpffs already there'; exit 3; fi
         {s} xdp attach --iface fh0 --mode generic
         echo \"fs after attach: $(stat -f -c %T /sys/fs/bpf)\"
         {s} xdp status --json
         {s} xdp attach --iface fh0 --mode generic
         {s} xdp detach --iface fh0 --purge",
        s = stator()
    );
    let mut cmd = a.command("sh");
    cmd.args(["-c", &script]);
    let out = sh(cmd);
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(stdout.contains("fs after attach: bpf_fs"), "{stdout}");
    assert!(
        stdout.contains("\"fh0\""),
        "status names the interface: {stdout}"
    );
    assert!(
        stdout.contains("\"buckets_per_cpu\": 524288"),
        "status describes the IPv4 table (default conntrack_entries: 2^19 buckets per CPU): \
         {stdout}"
    );
    assert_eq!(
        err.matches("mounted one at /sys/fs/bpf").count(),
        1,
        "one line says a bpffs was mounted, and only the first command mounts: {err}"
    );
    a.delete().unwrap();
    b.delete().unwrap();
}

#[test]
fn bench_veth_runs_where_no_bpffs_is() {
    assert!(
        stator_xdp::is_root(),
        "this test creates network namespaces and loads XDP: run as root"
    );
    let out_json = stator_testkit::scratch::unique_path("stator-fresh-veth", ".json");
    let script = format!(
        "set -e
         umount -R /sys/fs/bpf 2>/dev/null || true
         if [ \"$(stat -f -c %T /sys/fs/bpf)\" = bpf_fs ]; then echo 'bpffs still there'; exit 3; fi
         {s} bench veth --quick --flows 100 --out {o} & p=$!
         wait $p
         echo \"pid: $p\"
         echo \"left: $(ls /sys/fs/bpf | tr '\\n' ' ')\"
         echo \"bpf mounts: $(grep -c ' bpf ' /proc/self/mounts || true)\"",
        s = stator(),
        o = out_json.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    let out = sh(cmd);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_json).expect("the JSON report"))
            .unwrap();
    let _ = std::fs::remove_file(&out_json);
    // The benchmark's own smoke test: numbers for every row (their size is never asserted).
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), 8, "4 programs × 2 flow counts");
    for r in results {
        let pps = r["pps"].as_f64().unwrap_or(-1.0);
        assert!(
            pps > 0.0 && pps.is_finite(),
            "{}: pps = {pps}",
            r["variant"]
        );
        if r["variant"]
            .as_str()
            .is_some_and(|v| v.starts_with("stator"))
        {
            let (t, d) = (r["tunnelled"].as_u64(), r["delivered"].as_u64());
            assert!(t.unwrap() + 10 >= d.unwrap(), "the sink got GRE: {r}");
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` line in {stdout}"))
            .to_string()
    };
    // The benchmark's namespaces and pins carry its pid (`sbv-<pid>-<n>-<nanos>-…`).
    let prefix = format!("sbv-{}-", line("pid: "));
    let left = line("left: ");
    assert!(
        left.split_whitespace().all(|p| !p.starts_with(&prefix)),
        "pins left behind: {left}"
    );
    // It pins on a bpffs of its own under the temp directory and unmounts it when done: the
    // host's /sys/fs/bpf stays as it was (unmounted here), and no bpffs is left anywhere.
    assert_eq!(line("bpf mounts: "), "0", "a bpffs left mounted");
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&netns.stdout).contains(&prefix),
        "benchmark namespaces left behind"
    );
}
