//! The ladder's table, goal and JSON.

use serde_json::{Value, json};

use super::ladder::{Step, StepResult};

/// The goal of the issue: step 5 receives at least this many times step 1.
pub const GOAL_RATIO: f64 = 3.0;

/// A step is receiver-limited when the generator offered at least this much more than was
/// read: the figure is then the receiver's, not the sender's.
const LIMITED: f64 = 1.05;

/// Whether `r`'s receivers, not the generator, limited it.
pub fn receiver_limited(r: &StepResult) -> bool {
    r.offered_pps() >= LIMITED * r.pps()
}

fn find(results: &[StepResult], step: Step) -> Option<&StepResult> {
    results.iter().find(|r| r.step == step)
}

fn split(r: &StepResult) -> String {
    r.split()
        .iter()
        .map(|p| format!("{p:.0}"))
        .collect::<Vec<_>>()
        .join("/")
        + "%"
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Two tables: what each step received and what it cost, then where the rest was dropped.
pub fn table(results: &[StepResult]) -> String {
    use std::fmt::Write as _;
    let base = find(results, Step::Naive);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:>8} {:>8} {:>6} {:>6} {:>11} {:>7} {:>8} {:>6}",
        "step", "offered", "received", "lost", "÷ 1", "per thread", "rx CPU", "CPU ns", "÷ 1"
    );
    let _ = writeln!(
        out,
        "{:<24} {:>8} {:>8} {:>6} {:>6} {:>11} {:>7} {:>8} {:>6}",
        "", "Mpps", "Mpps", "%", "", "", "% of 1", "/ dgram", ""
    );
    for r in results {
        let ratio = base.map_or(f64::NAN, |b| r.pps() / b.pps().max(1e-9));
        let cpu_ratio = base.map_or(f64::NAN, |b| r.cpu_ns_per_packet() / b.cpu_ns_per_packet());
        let _ = writeln!(
            out,
            "{:<24} {:>8.3} {:>8.3} {:>6.1} {:>6.2} {:>11} {:>7.0} {:>8.0} {:>6.2}",
            format!("{} {}", r.step.number(), r.step.name()),
            r.offered_pps() / 1e6,
            r.pps() / 1e6,
            r.lost_percent(),
            ratio,
            split(r),
            r.cpu_percent(),
            r.cpu_ns_per_packet(),
            cpu_ratio,
        );
    }
    let _ = writeln!(
        out,
        "\n{:<24} {:>11} {:>12} {:>12} {:>12} {:>9}",
        "drops where they happen", "veth ring", "sockets", "RcvbufErrors", "InErrors", "gen CPU"
    );
    for r in results {
        let _ = writeln!(
            out,
            "{:<24} {:>11} {:>12} {:>12} {:>12} {:>8.0}%",
            format!("{} {}", r.step.number(), r.step.name()),
            thousands(r.veth_dropped),
            thousands(r.socket_drops.iter().sum()),
            thousands(r.mib.rcvbuf_errors),
            thousands(r.mib.in_errors),
            r.gen_cpu_percent(),
        );
    }
    out
}

/// What the run says: about the goal (step 5 ≥ 3× step 1 with the offered load above both),
/// or, when every step was offered one fixed `rate`, what each step cost and lost at it.
pub fn verdict(results: &[StepResult], rate: Option<f64>) -> Vec<String> {
    match rate {
        Some(rate) => fixed_verdict(results, rate),
        None => goal_verdict(results),
    }
}

/// The ladder at one offered rate: the throughput cannot differ much, so what each step costs
/// (the receivers' CPU per datagram) and loses is the figure.
fn fixed_verdict(results: &[StepResult], rate: f64) -> Vec<String> {
    let mut lines = vec![format!(
        "every step offered a fixed {:.3} Mpps: the ladder shown by what each step loses and \
         what its receivers pay per datagram",
        rate / 1e6
    )];
    for r in results {
        lines.push(format!(
            "  step {} {}: took {:.3} Mpps, lost {:.1}%, {:.0} ns of receiver CPU per datagram, \
             {:.0}% of one CPU{}",
            r.step.number(),
            r.step.name(),
            r.pps() / 1e6,
            r.lost_percent(),
            r.cpu_ns_per_packet(),
            r.cpu_percent(),
            if r.offered_pps() < 0.9 * rate {
                format!(
                    " (the generators kept only {:.3} Mpps of the rate)",
                    r.offered_pps() / 1e6
                )
            } else {
                String::new()
            }
        ));
    }
    if let (Some(one), Some(five)) = (find(results, Step::Naive), find(results, Step::Reuseport)) {
        lines.push(format!(
            "step 5 against step 1 at the same offered rate: {:.2}× the datagrams taken, \
             lost {:.1}% instead of {:.1}%, {:.2}× the CPU per datagram",
            five.pps() / one.pps().max(1e-9),
            five.lost_percent(),
            one.lost_percent(),
            five.cpu_ns_per_packet() / one.cpu_ns_per_packet().max(1e-9),
        ));
    }
    lines
}

fn goal_verdict(results: &[StepResult]) -> Vec<String> {
    let (Some(one), Some(five)) = (find(results, Step::Naive), find(results, Step::Reuseport))
    else {
        return vec!["goal: needs steps 1 and 5 in the same run".into()];
    };
    let ratio = five.pps() / one.pps().max(1e-9);
    let cpu = one.cpu_ns_per_packet() / five.cpu_ns_per_packet().max(1e-9);
    let limited = receiver_limited(one) && receiver_limited(five);
    let mut lines = vec![format!(
        "goal: step 5 ≥ {GOAL_RATIO}× step 1 in received pps with the offered load above both: \
         {ratio:.2}× ({:.3} / {:.3} Mpps; offered {:.3} and {:.3} Mpps) — {}",
        five.pps() / 1e6,
        one.pps() / 1e6,
        five.offered_pps() / 1e6,
        one.offered_pps() / 1e6,
        if ratio >= GOAL_RATIO && limited {
            "met"
        } else if !limited {
            "not shown: the generator, not the receiver, limited a step"
        } else {
            "missed"
        }
    )];
    if ratio < GOAL_RATIO || !limited {
        lines.push(format!(
            "instead, the receiving threads' own CPU time per datagram: step 1 {:.0} ns, step 5 \
             {:.0} ns (step 1 ÷ step 5 = {cpu:.2}×); they had {:.0}% and {:.0}% of one CPU",
            one.cpu_ns_per_packet(),
            five.cpu_ns_per_packet(),
            one.cpu_percent(),
            five.cpu_percent(),
        ));
    }
    lines
}

/// The whole run as JSON.
pub fn json(results: &[StepResult], meta: Value, rate: Option<f64>) -> Value {
    let base = find(results, Step::Naive);
    let steps: Vec<Value> = results
        .iter()
        .map(|r| {
            json!({
                "step": r.step.number(),
                "name": r.step.name(),
                "what": r.step.what(),
                "seconds": r.secs,
                "offered": r.offered,
                "offered_pps": r.offered_pps(),
                "offered_per_generator": r.offered_each,
                "lost_percent": r.lost_percent(),
                "received": r.received(),
                "pps": r.pps(),
                "ratio_to_step1": base.map(|b| r.pps() / b.pps().max(1e-9)),
                "receiver_limited": receiver_limited(r),
                "cpu_ns_per_datagram": r.cpu_ns_per_packet(),
                "cpu_ratio_to_step1": base.map(|b| r.cpu_ns_per_packet() / b.cpu_ns_per_packet()),
                "generator_pinned": r.gen_pinned,
                "generator_cpu_percent": r.gen_cpu_percent(),
                "generator_cpu_ns_per_frame": r.gen_cpu_ns as f64 / r.offered.max(1) as f64,
                "receivers_cpu_percent": r.cpu_percent(),
                "drops": {
                    "veth_ring": r.veth_dropped,
                    "sockets": r.socket_drops,
                    "rcvbuf_errors": r.mib.rcvbuf_errors,
                    "in_errors": r.mib.in_errors,
                    "no_ports": r.mib.no_ports,
                },
                "veth_delivered": r.veth_delivered,
                "in_datagrams": r.mib.in_datagrams,
                "threads": r.threads.iter().map(|t| json!({
                    "socket": t.socket,
                    "cpu": t.cpu,
                    "pinned": t.pinned,
                    "packets": t.packets,
                    "bytes": t.bytes,
                    "calls": t.calls,
                    "datagrams_per_call": t.packets as f64 / t.calls.max(1) as f64,
                    "cpu_ns": t.cpu_ns,
                })).collect::<Vec<_>>(),
                "split_percent": r.split(),
                "steering": r.steer_counters.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
                "lines": r.lines.iter().map(|l| json!({
                    "seconds": l.secs,
                    "pps": l.packets as f64 / l.secs.max(1e-9),
                    "bytes_per_second": l.bytes as f64 / l.secs.max(1e-9),
                    "offered_pps": l.offered as f64 / l.secs.max(1e-9),
                    "line": l.render(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "bench": "udp",
        "meta": meta,
        "steps": steps,
        "goal": {"step5_over_step1": GOAL_RATIO, "verdict": verdict(results, rate)},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
