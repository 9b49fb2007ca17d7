//! What `stator xdp` and `stator decap` print alike: an attachment made, a detach, and the
//! table of attachments found in a pin directory. One place, so both read the same.

use std::path::Path;

use anyhow::Result;
use serde_json::{Value, json};
use stator_xdp::{AttachStatus, Attachment};

/// Prints the warnings of an attachment on stderr and one line about it on stdout.
pub fn print_attached(at: &Attachment) {
    for w in &at.warnings {
        eprintln!("warning: {w}");
    }
    println!(
        "{} {} ({}): {} mode, program id {}",
        if at.replaced {
            "re-attached"
        } else {
            "attached to"
        },
        at.iface,
        at.ifindex,
        at.mode.name(),
        at.prog_id
    );
}

/// Detaches the program pinned under `pin_path` from `ifaces` (or from every interface with
/// `all`), says what was detached, then runs `purge` when asked to remove the pinned maps.
pub fn detach(
    pin_path: &Path,
    ifaces: &[String],
    all: bool,
    purge: Option<fn(&Path) -> stator_xdp::Result<()>>,
) -> Result<()> {
    let ifaces = if all {
        stator_xdp::detach_all(pin_path)?
    } else {
        for iface in ifaces {
            stator_xdp::detach(pin_path, iface)?;
        }
        ifaces.to_vec()
    };
    for i in &ifaces {
        println!("detached from {i}");
    }
    if ifaces.is_empty() {
        println!("nothing was attached");
    }
    if let Some(purge) = purge {
        purge(pin_path)?;
        println!("removed the pinned maps under {}", pin_path.display());
    }
    Ok(())
}

/// The attachments as JSON objects.
pub fn attachments_json(attachments: &[AttachStatus]) -> Value {
    attachments
        .iter()
        .map(|a| {
            json!({
                "iface": a.iface, "ifindex": a.ifindex, "mode": a.mode.name(),
                "prog_id": a.prog_id, "link_id": a.link_id,
            })
        })
        .collect()
}

/// The attachments as a table (or a line saying there are none).
pub fn print_attachments(attachments: &[AttachStatus]) {
    if attachments.is_empty() {
        println!("not attached to any interface");
        return;
    }
    println!(
        "\n{:<16} {:>8} {:<8} {:>8} {:>8}",
        "IFACE", "IFINDEX", "MODE", "PROG_ID", "LINK_ID"
    );
    for a in attachments {
        println!(
            "{:<16} {:>8} {:<8} {:>8} {:>8}",
            a.iface,
            a.ifindex,
            a.mode.name(),
            a.prog_id,
            a.link_id
        );
    }
}
