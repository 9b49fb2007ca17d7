//! What a poller (the status page, a script) needs besides status, VIPs and backends:
//! `GET /v1/events` (recent events, incrementally) and `GET /v1/dataplane` (the data plane's
//! counters as JSON, the numbers `/metrics` exposes as `stator_packets_total`,
//! `stator_drops_total` and the connection-table families).

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ApiError, Ctx};
use stator_control::ControlError;

/// Most events one answer carries.
pub const EVENTS_LIMIT: usize = stator_control::events::KEPT;

/// `?since=` and `?limit=` of `GET /v1/events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    since: Option<u64>,
    limit: Option<usize>,
}

/// `GET /v1/events?since=N&limit=M`: events with a sequence number above `N` (all kept when
/// absent), the newest `M` of them at most, oldest first.
pub async fn events(
    State(ctx): State<Ctx>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ControlError::bad_request(e.body_text(), None))?;
    let limit = match q.limit {
        None => EVENTS_LIMIT,
        Some(n) if (1..=EVENTS_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(ControlError::bad_request(
                format!("limit {n} is out of range: 1-{EVENTS_LIMIT}"),
                Some("limit"),
            )
            .into());
        }
    };
    let page = ctx.events.since(q.since.unwrap_or(0), limit);
    Ok(Json(json!(page)))
}

/// `GET /v1/dataplane`: counters summed over CPUs, since the data plane was loaded (they
/// survive restarts with `on_exit = "keep"`).
pub async fn dataplane(State(ctx): State<Ctx>) -> Result<Json<Value>, ApiError> {
    let reader = std::sync::Arc::clone(&ctx.reader);
    let c = tokio::task::spawn_blocking(move || reader.counters())
        .await
        .map_err(|e| ControlError::io("API task", std::io::Error::other(e.to_string())))?
        .map_err(ControlError::from)?;
    let v = ctx.view();
    let counters: Map<String, Value> = c
        .counters
        .iter()
        .map(|(k, n)| (k.label().to_owned(), json!(n)))
        .collect();
    let drops: Map<String, Value> = c
        .drops
        .iter()
        .map(|(r, n)| (r.label().to_owned(), json!(n)))
        .collect();
    Ok(Json(json!({
        "kind": v.plane,
        "healthy": v.forwarder.healthy,
        "counters": counters,
        "drops": drops,
    })))
}
