//! What the XDP, veth and AF_XDP benchmarks share in their reports: the JSON file, the CPU.

use crate::error::{Context, Result};

/// Writes a benchmark's JSON report to `out` (creating its directory) and, when `json`, prints
/// it too; true when printed (the caller then prints no table).
pub(crate) fn write_report(
    out: &std::path::Path,
    json: bool,
    report: &serde_json::Value,
) -> Result<bool> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(report)? + "\n";
    std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    if json {
        print!("{text}");
    }
    Ok(json)
}

/// The CPU's model name (`/proc/cpuinfo`), empty when unknown.
pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default()
}
