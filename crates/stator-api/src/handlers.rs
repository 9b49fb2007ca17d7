//! Status, configuration, VIPs, backends, drain.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use stator_config::{Config, check_str};
use tokio::sync::oneshot;

use super::{ApiError, Ctx};
use stator_control::ControlError;
use stator_control::reconciler::Request;
use stator_control::view::{View, since_baseline, unix_seconds};

/// The most connection-table flows `GET /v1/backends` walks to count connections.
pub const SCAN_LIMIT: usize = 1 << 20;

async fn ask<T>(
    ctx: &Ctx,
    make: impl FnOnce(oneshot::Sender<Result<T, ControlError>>) -> Request,
) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    ctx.requests
        .send(make(tx))
        .await
        .map_err(|_| ControlError::ShuttingDown)?;
    Ok(rx.await.map_err(|_| ControlError::ShuttingDown)??)
}

/// `GET /v1/status`.
pub async fn status(State(ctx): State<Ctx>) -> Json<Value> {
    let v = ctx.view();
    let announcer = super::metrics::announcer_status(&ctx);
    let checks = ctx.board.statuses();
    let count = |s: &str| checks.iter().filter(|(_, c)| c.state == s).count();
    let reals = v.built.as_ref().map_or(0, |b| b.snapshot.reals.len());
    let bgp = match (&v.config.bgp, announcer) {
        (None, _) => json!({ "enabled": false }),
        (Some(_), None) => json!({ "enabled": true, "running": false }),
        (Some(_), Some(a)) => json!({
            "enabled": true,
            "running": true,
            "bird_reachable": a.bird_reachable,
            "bird_version": a.bird_version,
            "last_error": a.last_error,
            "sessions": a.sessions.iter().map(|s| json!({
                "name": s.name, "neighbor": s.neighbor, "state": s.state,
                "established": s.established, "exported": s.exported,
            })).collect::<Vec<_>>(),
            "announced": a.routes.iter().filter(|r| r.announced).map(|r| r.address).collect::<Vec<_>>(),
        }),
    };
    Json(json!({
        "node": v.config.node.name,
        "version": env!("CARGO_PKG_VERSION"),
        "commit": &*ctx.commit,
        "phase": v.phase,
        "config": {
            "generation": v.config_generation,
            "source": v.config_source,
            "applied_at": unix_seconds(v.config_applied_at),
            "reloads_ok": v.stats.reloads_ok,
            "reloads_failed": v.stats.reloads_failed,
        },
        "snapshot": {
            "generation": v.generation,
            "committed_at": v.committed_at.map(unix_seconds),
            "vips": v.config.vips.len(),
            "reals": reals,
            "last_build_seconds": v.stats.build.last,
            "last_commit_seconds": v.stats.commit.last,
            "last_reload_seconds": v.stats.reload.last,
        },
        "forwarder": {
            "kind": v.plane,
            "healthy": v.forwarder.healthy,
            "reason": v.forwarder.reason,
            "since": unix_seconds(v.forwarder.since),
            "interfaces": v.interfaces,
            "stats": plane_stats_json(&ctx.reader.plane_stats()),
        },
        "health": {
            "checks": checks.len(),
            "up": count("up"),
            "down": count("down"),
            "unknown": count("unknown"),
        },
        "bgp": bgp,
        "last_error": v.last_error,
    }))
}

/// The data plane's own figures by family: `{family: [{labels…, "value": n}]}` (empty for a
/// plane without any).
fn plane_stats_json(stats: &[stator_plane::PlaneStat]) -> Value {
    let mut out: std::collections::BTreeMap<&str, Vec<Value>> = Default::default();
    for s in stats {
        let mut sample: serde_json::Map<String, Value> = s
            .labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        sample.insert("value".into(), json!(s.value));
        out.entry(s.family).or_default().push(Value::Object(sample));
    }
    json!(out)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigQuery {
    format: Option<String>,
}

fn etag(generation: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{generation}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

/// `GET /v1/config`: the running configuration's TOML, with its generation as `ETag`; or
/// JSON with `?format=json`.
pub async fn config_get(
    State(ctx): State<Ctx>,
    query: Result<Query<ConfigQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ControlError::bad_request(e.body_text(), Some("format")))?;
    let v = ctx.view();
    let mut response = match q.format.as_deref() {
        None | Some("toml") => (
            [(header::CONTENT_TYPE, "application/toml; charset=utf-8")],
            v.config_text.to_string(),
        )
            .into_response(),
        Some("json") => Json(json!({
            "generation": v.config_generation,
            "source": v.config_source,
            "applied_at": unix_seconds(v.config_applied_at),
            "toml": &*v.config_text,
        }))
        .into_response(),
        Some(other) => {
            return Err(ControlError::bad_request(
                format!("unknown format {other:?} (toml | json)"),
                Some("format"),
            )
            .into());
        }
    };
    response
        .headers_mut()
        .insert(header::ETAG, etag(v.config_generation));
    Ok(response)
}

/// The TOML text of a request body: TOML as is, JSON converted (same keys and structure).
fn body_text(headers: &HeaderMap, body: &[u8]) -> Result<(String, bool), ControlError> {
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/toml");
    let essence = ctype
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let text = std::str::from_utf8(body)
        .map_err(|_| ControlError::bad_request("the body is not UTF-8", None))?;
    match essence.as_str() {
        "application/toml" | "application/x-toml" | "text/toml" | "text/plain" | "" => {
            Ok((text.to_owned(), false))
        }
        "application/json" => stator_config::toml_from_json(text)
            .map(|toml| (toml, true))
            .map_err(|e| {
                let field = (!e.path.is_root()).then(|| e.path.to_string());
                ControlError::bad_request(e.error.to_string(), field.as_deref())
            }),
        other => Err(ControlError::UnsupportedType {
            given: other.to_owned(),
        }),
    }
}

/// `If-Match: "7"` (or `7`, or `*`).
fn if_match(headers: &HeaderMap) -> Result<Option<u64>, ControlError> {
    let Some(v) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let bad = || {
        ControlError::bad_request(
            "If-Match must be a generation from GET /v1/config's ETag, such as \"7\"",
            Some("If-Match"),
        )
    };
    let text = v.to_str().map_err(|_| bad())?.trim();
    if text == "*" {
        return Ok(None);
    }
    text.trim_matches('"').parse().map(Some).map_err(|_| bad())
}

/// `PUT /v1/config`.
pub async fn config_put(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (text, from_json) = body_text(&headers, &body)?;
    let expected = if_match(&headers)?;
    let source = if from_json {
        "<admin API, JSON>"
    } else {
        "<admin API>"
    }
    .to_owned();
    let report = ask(&ctx, |reply| Request::Apply {
        text,
        source,
        origin: stator_control::reconciler::Origin::Api,
        if_match: expected,
        reply,
    })
    .await?;
    let mut r = Json(json!(report)).into_response();
    r.headers_mut()
        .insert(header::ETAG, etag(report.config_generation));
    Ok(r)
}

/// `POST /v1/config:validate`: what `stator check --json` says, plus what would stop this
/// node from applying it (a setting that needs a restart, a host precondition). Always 200
/// when the body could be read; `ok` says whether a `PUT` would be accepted.
pub async fn config_validate(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let (text, _) = body_text(&headers, &body)?;
    let report = check_str("<admin API>", &text);
    let mut out = json!(report);
    if report.ok
        && let Ok(config) = stator_config::from_toml_str("<admin API>", &text)
    {
        let running = ctx.view();
        let problem = stator_control::host::reloadable(&running.config, &config)
            .and_then(|()| stator_control::host::api_files_unchanged(&running.config, &config))
            .and_then(|()| {
                if ctx.host_checks {
                    stator_control::host::forwarding_enabled(&config)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| stator_control::host::tls_files(&*ctx.tls, &config))
            .err();
        if let Some(e) = problem {
            out["ok"] = json!(false);
            out["errors"] = json!([{
                "path": e.field(),
                "location": null,
                "message": e.to_string(),
            }]);
        }
    }
    Ok(Json(out))
}

fn traffic_json(t: stator_core::Traffic) -> Value {
    json!({ "packets": t.packets, "bytes": t.bytes })
}

/// Runs `f` on a blocking thread: answers that read per-VIP or per-real counters make one
/// map lookup each, which must not hold up the runtime's workers.
async fn blocking(
    ctx: Ctx,
    f: fn(&Ctx) -> Result<Value, ControlError>,
) -> Result<Json<Value>, ApiError> {
    let value = tokio::task::spawn_blocking(move || f(&ctx))
        .await
        .map_err(|e| ControlError::io("API task", std::io::Error::other(e.to_string())))??;
    Ok(Json(value))
}

/// `GET /v1/vips`.
pub async fn vips(State(ctx): State<Ctx>) -> Result<Json<Value>, ApiError> {
    blocking(ctx, vips_json).await
}

fn vips_json(ctx: &Ctx) -> Result<Value, ControlError> {
    let v = ctx.view();
    let announcer = super::metrics::announcer_status(ctx);
    let mut out = Vec::with_capacity(v.config.vips.len());
    for (i, vip) in v.config.vips.iter().enumerate() {
        let built = v.built.as_ref().and_then(|b| b.vip(&vip.key));
        let count = |name: &str| {
            built.map_or(0, |b| {
                b.reals.iter().filter(|r| r.plan.name() == name).count()
            })
        };
        let traffic = match built {
            Some(b) => since_baseline(ctx.reader.vip_traffic(b.id)?, v.vip_baselines.get(&b.id)),
            None => stator_core::Traffic::default(),
        };
        out.push(json!({
            "name": vip.name,
            "address": vip.key.addr,
            "port": vip.key.port,
            "protocol": vip.key.proto.as_str(),
            "id": built.map(|b| b.id.0),
            "encap": format!("{:?}", vip.encap).to_ascii_lowercase(),
            "table_size": vip.table_size,
            "backends": { "usable": count("usable"), "draining": count("draining"), "absent": count("absent") },
            "announce": v.announce.get(i).copied().unwrap_or(false),
            "announced": announcer.as_ref().map(|a| a.announced(vip.key.addr)),
            "traffic": traffic_json(traffic),
        }));
    }
    Ok(json!({ "generation": v.generation, "vips": out }))
}

/// Connections per real: connection-table entries that name it and are not idle past their
/// protocol's timeout. Returns the counts, the flows walked and whether the walk finished.
fn count_connections(
    ctx: &Ctx,
    config: &Config,
) -> Result<(BTreeMap<u32, u64>, usize, bool), ControlError> {
    let _one_at_a_time = ctx
        .scan
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = ctx.reader.clock_ns();
    let tcp = u64::try_from(config.dataplane.tcp_timeout.as_nanos()).unwrap_or(u64::MAX);
    let udp = u64::try_from(config.dataplane.udp_timeout.as_nanos()).unwrap_or(u64::MAX);
    let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let walked = ctx.reader.conntrack_scan(SCAN_LIMIT, &mut |key, entries| {
        let timeout = if key.proto == 6 { tcp } else { udp };
        seen.clear();
        for e in entries {
            if e.last_seen_ns != 0 && now.saturating_sub(e.last_seen_ns) <= timeout {
                seen.insert(e.real_id);
            }
        }
        for r in &seen {
            *counts.entry(*r).or_default() += 1;
        }
    })?;
    Ok((counts, walked, walked < SCAN_LIMIT))
}

/// `GET /v1/backends`.
pub async fn backends(State(ctx): State<Ctx>) -> Result<Json<Value>, ApiError> {
    blocking(ctx, backends_json).await
}

fn backends_json(ctx: &Ctx) -> Result<Value, ControlError> {
    let v = ctx.view();
    let (conns, walked, complete) = count_connections(ctx, &v.config)?;
    let checks: BTreeMap<_, _> = ctx.board.statuses().into_iter().collect();
    let now = tokio::time::Instant::now();
    let mut out = Vec::with_capacity(v.config.backends.len());
    for (i, b) in v.config.backends.iter().enumerate() {
        let bv = &v.backends[i];
        let mut vips = Vec::new();
        for (vip, built) in v
            .config
            .vips
            .iter()
            .zip(v.built.iter().flat_map(|b| b.vips.iter()))
        {
            for r in built.reals.iter().filter(|r| r.backend.0 == i) {
                let traffic =
                    since_baseline(ctx.reader.real_traffic(r.id)?, v.real_baselines.get(&r.id));
                vips.push(json!({
                    "vip": vip.name,
                    "real_id": r.id.0,
                    "plan": r.plan,
                    "weight": r.weight,
                    "slots": r.slots,
                    "table_share": f64::from(r.slots) / f64::from(vip.table_size),
                    "connections": conns.get(&r.id.0).copied().unwrap_or(0),
                    "traffic": traffic_json(traffic),
                }));
            }
        }
        out.push(json!({
            "id": b.name,
            "address": b.address,
            "port": b.port,
            "health": bv.health,
            "drain": bv.drain.json(now),
            "transitions": { "up": bv.transitions_up, "down": bv.transitions_down },
            "checks": bv.checks.iter().map(|k| {
                let s = checks.get(k);
                json!({
                    "url": k.url(),
                    "state": s.map_or("unknown", |s| s.state),
                    "successes": s.map(|s| s.successes),
                    "failures": s.map(|s| s.failures),
                    "last_error": s.and_then(|s| s.last_error.clone()),
                })
            }).collect::<Vec<_>>(),
            "vips": vips,
        }));
    }
    Ok(json!({
        "generation": v.generation,
        "conntrack": { "flows_walked": walked, "complete": complete },
        "backends": out,
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainBody {
    timeout: Option<String>,
}

fn backend_json(v: &View, id: &str) -> Value {
    let i = v.config.backends.iter().position(|b| b.name == id);
    match i {
        Some(i) => {
            json!({
                "id": id,
                "health": v.backends[i].health,
                "drain": v.backends[i].drain.json(tokio::time::Instant::now()),
            })
        }
        None => json!({ "id": id }),
    }
}

/// `POST /v1/backends/{id}/drain`, optional body `{"timeout": "30s"}`.
pub async fn drain(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let parsed: DrainBody = if body.iter().all(u8::is_ascii_whitespace) {
        DrainBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ControlError::bad_request(format!("invalid drain request: {e}"), Some("timeout"))
        })?
    };
    let timeout: Option<Duration> = match parsed.timeout.as_deref() {
        None => None,
        Some(t) => Some(
            stator_config::duration::parse_duration(t)
                .map_err(|e| ControlError::bad_request(format!("timeout: {e}"), Some("timeout")))?,
        ),
    };
    let backend = id.clone();
    ask(&ctx, |reply| Request::Drain {
        backend,
        timeout,
        reply,
    })
    .await?;
    Ok((StatusCode::OK, Json(backend_json(&ctx.view(), &id))).into_response())
}

/// `POST /v1/backends/{id}/undrain`.
pub async fn undrain(State(ctx): State<Ctx>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let backend = id.clone();
    ask(&ctx, |reply| Request::Undrain { backend, reply }).await?;
    Ok((StatusCode::OK, Json(backend_json(&ctx.view(), &id))).into_response())
}

/// `GET /v1/listeners`.
pub async fn listeners(State(ctx): State<Ctx>) -> Result<Json<Value>, ApiError> {
    blocking(ctx, |ctx| Ok(listeners_json(ctx))).await
}

fn listeners_json(ctx: &Ctx) -> Value {
    use std::sync::atomic::Ordering::Relaxed;
    let views = ctx.proxy.lock().listeners();
    let listeners: Vec<Value> = views
        .iter()
        .map(|l| {
            let s = &l.stats;
            let upstreams: Vec<Value> = l
                .upstreams
                .iter()
                .map(|u| {
                    let errors: serde_json::Map<String, Value> = stator_proxy::ErrorKind::ALL
                        .iter()
                        .map(|k| (k.label().to_owned(), json!(u.stats.errors(*k))))
                        .collect();
                    json!({
                        "id": u.spec.name,
                        "address": u.spec.addr.ip(),
                        "port": u.spec.addr.port(),
                        "state": u.state,
                        "weight": u.spec.weight,
                        "active": u.stats.active.load(Relaxed),
                        "open_connections": u.stats.open.load(Relaxed),
                        "connections": u.stats.connects.load(Relaxed),
                        "requests": u.stats.requests.load(Relaxed),
                        "reused": u.stats.reused.load(Relaxed),
                        "bytes": { "in": u.stats.bytes_in.load(Relaxed), "out": u.stats.bytes_out.load(Relaxed) },
                        "errors": errors,
                        "passive": {
                            "excluded": u.excluded_for.is_some(),
                            "excluded_for_seconds": u.excluded_for.map(|d| d.as_secs_f64()),
                            "recent_failures": u.recent_failures,
                            "exclusions": u.stats.passive_excluded.load(Relaxed),
                        },
                    })
                })
                .collect();
            let client_errors: serde_json::Map<String, Value> = stator_proxy::ClientErrorKind::ALL
                .iter()
                .map(|k| (k.label().to_owned(), json!(s.client_errors(*k))))
                .collect();
            let udp = (l.spec.protocol == stator_proxy::Protocol::Udp).then(|| {
                let u = &s.udp;
                let drops: serde_json::Map<String, Value> = stator_proxy::UdpDrop::ALL
                    .iter()
                    .map(|k| (k.label().to_owned(), json!(u.drops(*k))))
                    .collect();
                json!({
                    "datagrams": {
                        "client_in": u.datagrams_in.load(Relaxed),
                        "client_out": u.datagrams_out.load(Relaxed),
                        "upstream_in": u.upstream_datagrams_in.load(Relaxed),
                        "upstream_out": u.upstream_datagrams_out.load(Relaxed),
                    },
                    "sessions_ended": {
                        "idle": u.sessions_expired.load(Relaxed),
                        "unreplied": u.sessions_unreplied.load(Relaxed),
                        "responses": u.sessions_completed.load(Relaxed),
                        "reclaimed": u.sessions_reclaimed.load(Relaxed),
                    },
                    "max_sessions": l.spec.udp.max_sessions,
                    "max_sessions_per_source": l.spec.udp.max_sessions_per_source,
                    "session_rate": l.spec.udp.session_rate,
                    "session_burst": l.spec.udp.session_burst,
                    "unreplied_timeout_seconds": l.spec.udp.unreplied_timeout.as_secs_f64(),
                    "responses": l.spec.udp.responses,
                    "proxy_protocol": l.spec.udp.proxy_protocol,
                    "drops": drops,
                })
            });
            json!({
                "name": l.spec.name,
                "address": l.address,
                "protocol": l.spec.protocol.as_str(),
                "pool": l.spec.pool,
                "workers": l.workers,
                "pin_workers": l.spec.pin_workers,
                "steering": l.spec.steering.as_str(),
                "steering_decisions": l.steering.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
                "worker_cpus": l.spec.worker_cpus,
                "scheduler": l.spec.algorithm.name(),
                "persistence_seconds": l.spec.persistence.map(|p| p.timeout.as_secs_f64()),
                "connections": { "total": s.connections.load(Relaxed), "active": s.active.load(Relaxed) },
                "max_connections": l.spec.max_connections,
                "max_connections_per_source": l.spec.max_connections_per_source,
                "source_prefixes": { "v4": l.spec.source_prefixes.v4, "v6": l.spec.source_prefixes.v6 },
                "requests": s.requests.load(Relaxed),
                "retries": s.retries.load(Relaxed),
                "retries_resent": s.retries_resent.load(Relaxed),
                "passive": { "max_fails": l.spec.passive.max_fails, "fail_timeout_seconds": l.spec.passive.fail_timeout.as_secs_f64() },
                "retry_methods": l.spec.http.retry_methods.names().collect::<Vec<_>>(),
                "bytes": { "in": s.bytes_in.load(Relaxed), "out": s.bytes_out.load(Relaxed) },
                "sessions": { "hits": s.session_hits.load(Relaxed), "evictions": s.session_evictions.load(Relaxed) },
                "client_errors": client_errors,
                "udp": udp,
                "backends": upstreams,
            })
        })
        .collect();
    let d = &ctx.proxy.descriptors;
    let sizing = d.sizing();
    let b = &d.budget;
    json!({
        "listeners": listeners,
        "reload_failures": ctx.proxy.reload_failures.load(Relaxed),
        "descriptors": {
            "limit": sizing.limit,
            "open": stator_sys::limits::open_fds().ok(),
            "reserved": sizing.reserve,
            "process_at_start": sizing.process,
            "worst_case": sizing.worst,
            "budget": (b.capacity() != u64::MAX).then(|| b.capacity()),
            "used": b.used(),
            "peak": b.peak(),
            "refused": b.refused(),
        },
    })
}
