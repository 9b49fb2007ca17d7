//! `GET /v1/trace`: which backend a flow gets on this node, and why — the paper's packet
//! tracer (§4.4) asked as a question instead of sent as a packet.
//!
//! The answer is computed, not guessed: the connection-table entries of the flow are read
//! from the data plane's own table (one per CPU for the per-CPU table: an entry exists only on
//! the CPU that saw the flow), and each, and the no-entry case, is run through
//! `stator_core::Forwarder::explain` over the active snapshot — the same decision the
//! forwarder makes, including timeouts and reselection of entries whose backend is gone.
//! A connection-table hit wins over Maglev, as in the forwarder.

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use stator_core::{
    Cause, CompiledSnapshot, Flow, Forwarder, ForwarderConfig, Proto, RealId, Trace, TraceOutcome,
};

use super::{ApiError, Ctx};
use stator_control::ControlError;
use stator_control::view::View;

/// The query of `GET /v1/trace`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceQuery {
    vip: Option<String>,
    src: Option<String>,
    sport: Option<String>,
    dport: Option<String>,
    proto: Option<String>,
    syn: Option<String>,
}

fn bad(reason: impl Into<String>, field: &str) -> ControlError {
    ControlError::bad_request(reason, Some(field))
}

fn port(text: Option<&str>, field: &str) -> Result<Option<u16>, ControlError> {
    text.map(|t| {
        t.parse::<u16>().map_err(|_| {
            bad(
                format!("{field} must be a port number (0-65535), not {t:?}"),
                field,
            )
        })
    })
    .transpose()
}

/// The flow a query names, resolving `vip` (a VIP name or address) against the config.
pub fn flow_of(q: &TraceQuery, v: &View) -> Result<(Flow, bool), ControlError> {
    let vip_text = q
        .vip
        .as_deref()
        .ok_or_else(|| bad("vip is required (a VIP name or address)", "vip"))?;
    let by_name = v.config.vips.iter().find(|x| x.name == vip_text);
    let addr: IpAddr = match by_name {
        Some(x) => x.key.addr,
        None => vip_text.parse().map_err(|_| ControlError::UnknownVip {
            vip: vip_text.to_owned(),
        })?,
    };
    let candidates: Vec<_> = match by_name {
        Some(x) => vec![x],
        None => v
            .config
            .vips
            .iter()
            .filter(|x| x.key.addr == addr)
            .collect(),
    };
    if candidates.is_empty() {
        return Err(ControlError::UnknownVip {
            vip: vip_text.to_owned(),
        });
    }
    let src: IpAddr = q
        .src
        .as_deref()
        .ok_or_else(|| bad("src is required (the client's address)", "src"))?
        .parse()
        .map_err(|_| bad("src must be an IP address", "src"))?;
    if src.is_ipv4() != addr.is_ipv4() {
        return Err(bad(
            "src and the VIP must be of the same address family",
            "src",
        ));
    }
    let sport = port(q.sport.as_deref(), "sport")?.unwrap_or(40000);
    let proto = match q.proto.as_deref() {
        None => candidates[0].key.proto,
        Some("tcp" | "6") => Proto::Tcp,
        Some("udp" | "17") => Proto::Udp,
        Some(other) => {
            return Err(bad(
                format!("proto must be tcp or udp, not {other:?}"),
                "proto",
            ));
        }
    };
    let dport = match port(q.dport.as_deref(), "dport")? {
        Some(p) => p,
        None => {
            let ports: Vec<u16> = candidates
                .iter()
                .filter(|x| x.key.proto == proto)
                .map(|x| x.key.port)
                .collect();
            match ports.as_slice() {
                [p] if *p != 0 => *p,
                _ => {
                    return Err(bad(
                        "dport is required for this VIP (it has several ports or any port)",
                        "dport",
                    ));
                }
            }
        }
    };
    let syn = match q.syn.as_deref() {
        None | Some("false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => {
            return Err(bad(
                format!("syn must be true or false, not {other:?}"),
                "syn",
            ));
        }
    };
    Ok((
        Flow {
            src,
            dst: addr,
            sport,
            dport,
            proto: proto.number(),
        },
        syn,
    ))
}

fn cause_name(c: Cause) -> &'static str {
    match c {
        Cause::NoCt => "no_conntrack",
        Cause::Syn => "syn",
        Cause::CtHit => "hit",
        Cause::CtMiss => "miss",
        Cause::CtExpired => "expired",
        Cause::CtReselect => "reselect",
    }
}

/// Answers a trace query against a view and the data plane's connection table.
pub fn answer(ctx: &Ctx, q: &TraceQuery) -> Result<Value, ControlError> {
    let v = ctx.view();
    let (flow, syn) = flow_of(q, &v)?;
    let built = v.built.as_ref().ok_or_else(|| ControlError::Unhealthy {
        reason: "no snapshot committed yet".into(),
    })?;
    let compiled = CompiledSnapshot::new(&built.snapshot);
    let names: BTreeMap<RealId, Value> = built
        .vips
        .iter()
        .flat_map(|bv| bv.reals.iter())
        .map(|r| {
            let b = v.config.backend(r.backend);
            (
                r.id,
                json!({ "id": b.name, "address": b.address, "real_id": r.id.0 }),
            )
        })
        .collect();
    let backend = |id: RealId| {
        names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| json!({ "real_id": id.0 }))
    };
    let now = ctx.reader.clock_ns();
    let explain = |entry: Option<stator_core::CtEntry>| -> Trace {
        let mut f = Forwarder::new(ForwarderConfig {
            cpus: 1,
            ct_capacity: 4,
            ..ForwarderConfig::default()
        });
        if let (Some(e), Some(key)) = (entry, flow.key()) {
            f.conn_table_mut(0).insert(key, e);
        }
        f.explain(&compiled, now, 0, &flow, syn)
    };
    let maglev = explain(None);
    let vip = maglev.vip.map(|m| {
        let name = built
            .vips
            .iter()
            .zip(&v.config.vips)
            .find(|(bv, _)| bv.id == m.id)
            .map(|(_, c)| c.name.clone());
        json!({ "name": name, "id": m.id.0, "wildcard": m.wildcard })
    });
    let entries = match flow.key() {
        Some(key) if maglev.vip.is_some() => ctx.reader.conntrack_lookup(&key)?,
        _ => Vec::new(),
    };
    let mut table = Vec::new();
    let mut hit = None;
    for (cpu, e) in entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.last_seen_ns != 0)
    {
        let t = explain(Some(*e));
        let verdict = t.selection.map_or("none", |s| cause_name(s.cause));
        if verdict == "hit" && hit.is_none() {
            hit = Some((cpu, t));
        }
        table.push(json!({
            "cpu": cpu,
            "backend": backend(RealId(e.real_id)),
            "idle_seconds": now.saturating_sub(e.last_seen_ns) as f64 / 1e9,
            "verdict": verdict,
        }));
    }
    let built_vip = maglev
        .vip
        .and_then(|m| built.vips.iter().find(|b| b.id == m.id));
    let table_size = built_vip.map(|b| b.table_size);
    // docs/forwarding.md §12: the previous table's backend for the same slot, while one is
    // kept; a non-SYN miss whose two backends differ goes to the current one with a second
    // chance naming this one
    let previous = built_vip
        .and_then(|b| {
            let p = b.previous.as_ref()?;
            let slot = maglev.selection?.slot?;
            Some((p, *p.table.get(slot as usize)?))
        })
        .map(|(p, id)| {
            let id = RealId(id);
            let named = names.get(&id).cloned().or_else(|| {
                built.snapshot.reals.get(&id).map(|r| {
                    let name = v
                        .config
                        .backends
                        .iter()
                        .find(|b| b.address == r.addr)
                        .map(|b| b.name.clone());
                    json!({ "id": name, "address": r.addr, "real_id": id.0 })
                })
            });
            json!({
                "backend": named.unwrap_or_else(|| json!({ "real_id": id.0 })),
                "until_seconds": p.until.saturating_duration_since(tokio::time::Instant::now()).as_secs_f64(),
            })
        });
    let maglev_json = json!({
        "cause": maglev.selection.map(|s| cause_name(s.cause)),
        "slot": maglev.selection.and_then(|s| s.slot),
        "table_size": table_size,
        "backend": match maglev.outcome { TraceOutcome::Real(id) => backend(id), _ => Value::Null },
        "previous": previous.unwrap_or(Value::Null),
    });
    let (decision, outcome) = match (&hit, maglev.outcome) {
        (_, TraceOutcome::NotVip) => ("not_vip", maglev.outcome),
        (Some((_, t)), _) => ("conntrack", t.outcome),
        (None, _) => ("maglev", maglev.outcome),
    };
    let (chosen, drop) = match outcome {
        TraceOutcome::Real(id) => (backend(id), Value::Null),
        TraceOutcome::Drop(r) => (Value::Null, json!(r.label())),
        TraceOutcome::NotVip => (Value::Null, Value::Null),
    };
    Ok(json!({
        "generation": v.generation,
        "node": v.config.node.name,
        "flow": {
            "src": flow.src, "dst": flow.dst, "sport": flow.sport, "dport": flow.dport,
            "proto": stator_core::Proto::name_of(flow.proto), "syn": syn,
        },
        "hash": maglev.hash,
        "vip": vip,
        "decision": if drop.is_null() { decision } else { "drop" },
        "backend": chosen,
        "drop_reason": drop,
        "conntrack_cpu": hit.map(|(cpu, _)| cpu),
        "conntrack": table,
        "maglev": maglev_json,
    }))
}

/// `GET /v1/trace?vip=&src=&sport=&dport=&proto=&syn=`.
pub async fn handler(
    State(ctx): State<Ctx>,
    query: Result<Query<TraceQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ControlError::bad_request(e.body_text(), None))?;
    let value = tokio::task::spawn_blocking(move || answer(&ctx, &q))
        .await
        .map_err(|e| ControlError::io("trace", std::io::Error::other(e.to_string())))??;
    Ok(Json(value))
}
