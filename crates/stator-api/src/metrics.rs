//! `GET /metrics`: Prometheus text exposition format 0.0.4.
//!
//! Names start with `stator_`, values are in base units (seconds, bytes), counters end in
//! `_total`. Labels: `vip` (VIP name), `backend` (stable name), `reason` (drop reason, as
//! in `docs/xdp.md`), and a few more named in `docs/operations.md`, which lists every
//! family. [`Exposition`] writes families one at a time, so a family's samples are always
//! together under its `# HELP` and `# TYPE`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use stator_bird::AnnouncerStatus;
use stator_core::Counter;

mod proxy;

use super::{ApiError, Ctx};
use stator_control::ControlError;
use stator_control::plan::Health;
use stator_control::view::{DrainView, View, since_baseline, unix_seconds};
use stator_health::CheckKey;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// `_sum` and `_count` of observations.
    Summary,
    /// Cumulative `_bucket{le}` counts, `_sum` and `_count`.
    Histogram,
}

/// A Prometheus text exposition being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    family: String,
}

fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a family.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
            Kind::Histogram => "histogram",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        name.clone_into(&mut self.family);
        self
    }

    /// Adds a sample of the current family (`suffix` is `""`, `_sum` or `_count`).
    pub fn sample_suffixed(
        &mut self,
        suffix: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) -> &mut Self {
        self.out.push_str(&self.family);
        self.out.push_str(suffix);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
        self
    }

    /// Adds a sample of the current family.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.sample_suffixed("", labels, value)
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The announcer's status, if one runs.
pub fn announcer_status(ctx: &Ctx) -> Option<AnnouncerStatus> {
    ctx.announcer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .map(stator_bird::AnnouncerThread::status)
}

fn b(x: bool) -> f64 {
    if x { 1.0 } else { 0.0 }
}

/// Renders every metric of a node.
pub fn render(ctx: &Ctx) -> Result<String, ControlError> {
    let v = ctx.view();
    let mut e = Exposition::new();
    node_metrics(&mut e, &v, &ctx.commit);
    api_metrics(&mut e, ctx);
    dataplane_metrics(&mut e, ctx, &v)?;
    plane_stat_metrics(&mut e, &ctx.reader.plane_stats());
    health_metrics(&mut e, ctx, &v);
    bgp_metrics(&mut e, ctx, &v);
    proxy::proxy_metrics(&mut e, ctx);
    Ok(e.finish())
}

/// The data plane's own figures ([`PlaneReader::plane_stats`]), one family at a time.
///
/// [`PlaneReader::plane_stats`]: stator_plane::PlaneReader::plane_stats
fn plane_stat_metrics(e: &mut Exposition, stats: &[stator_plane::PlaneStat]) {
    let mut families: Vec<&str> = Vec::new();
    for s in stats {
        if !families.contains(&s.family) {
            families.push(s.family);
        }
    }
    for family in families {
        let mut first = true;
        for s in stats.iter().filter(|s| s.family == family) {
            if first {
                let kind = if s.counter {
                    Kind::Counter
                } else {
                    Kind::Gauge
                };
                e.family(family, kind, s.help);
                first = false;
            }
            let labels: Vec<(&str, &str)> =
                s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            e.sample(&labels, s.value as f64);
        }
    }
}

fn node_metrics(e: &mut Exposition, v: &View, commit: &str) {
    e.family(
        "stator_build_info",
        Kind::Gauge,
        "Always 1; labels say what runs.",
    )
    .sample(
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("commit", commit),
            ("node", &v.config.node.name),
        ],
        1.0,
    );
    e.family(
        "stator_config_generation",
        Kind::Gauge,
        "Generation of the running configuration.",
    )
    .sample(&[], v.config_generation as f64);
    e.family(
        "stator_config_last_success_timestamp_seconds",
        Kind::Gauge,
        "When the running configuration was applied (Unix time).",
    )
    .sample(&[], unix_seconds(v.config_applied_at));
    e.family(
        "stator_config_reloads_total",
        Kind::Counter,
        "Configuration reloads, by result.",
    )
    .sample(&[("result", "success")], v.stats.reloads_ok as f64)
    .sample(&[("result", "failure")], v.stats.reloads_failed as f64);
    e.family(
        "stator_snapshot_generation",
        Kind::Gauge,
        "Generation of the snapshot the data plane forwards with.",
    )
    .sample(&[], v.generation as f64);
    e.family(
        "stator_commits_total",
        Kind::Counter,
        "Snapshot commits to the data plane, by result.",
    )
    .sample(&[("result", "success")], v.stats.commits_ok as f64)
    .sample(&[("result", "failure")], v.stats.commits_failed as f64);
    for (name, help, t) in [
        (
            "stator_table_build_seconds",
            "Building snapshots, Maglev tables included.",
            v.stats.build,
        ),
        (
            "stator_commit_seconds",
            "Committing snapshots to the data plane, grace period included.",
            v.stats.commit,
        ),
        (
            "stator_reload_seconds",
            "Applying configuration reloads, request to commit done.",
            v.stats.reload,
        ),
    ] {
        e.family(name, Kind::Summary, help)
            .sample_suffixed("_sum", &[], t.sum)
            .sample_suffixed("_count", &[], t.count as f64);
        let last = format!("stator_last_{}", name.trim_start_matches("stator_"));
        e.family(
            &last,
            Kind::Gauge,
            "The last observation of the summary without `last_`.",
        )
        .sample(&[], t.last);
    }
    e.family(
        "stator_forwarder_healthy",
        Kind::Gauge,
        "1 while the forwarder is attached, its maps answer and its self-test passes.",
    )
    .sample(&[("plane", v.plane)], b(v.forwarder.healthy));
    e.family(
        "stator_forwarder_failures_total",
        Kind::Counter,
        "Times the forwarder became unhealthy.",
    )
    .sample(&[("plane", v.plane)], v.forwarder.failures as f64);
}

fn api_metrics(e: &mut Exposition, ctx: &Ctx) {
    let s = &ctx.conn_stats;
    e.family(
        "stator_api_connections_total",
        Kind::Counter,
        "Admin API connections: accepted; evicted (idle, closed to make room at \
         api.max_connections); refused (closed at once, every connection busy).",
    )
    .sample(&[("result", "accepted")], s.accepted() as f64)
    .sample(&[("result", "evicted")], s.evicted() as f64)
    .sample(&[("result", "refused")], s.refused() as f64);
    e.family(
        "stator_api_connections_open",
        Kind::Gauge,
        "Admin API connections open now.",
    )
    .sample(&[], s.open() as f64);
}

fn dataplane_metrics(e: &mut Exposition, ctx: &Ctx, v: &View) -> Result<(), ControlError> {
    let c = ctx.reader.counters()?;
    counter_families(e, &c);
    e.family(
        "stator_drops_total",
        Kind::Counter,
        "Dropped packets, by reason.",
    );
    for (reason, n) in &c.drops {
        e.sample(&[("reason", reason.label())], *n as f64);
    }
    tracer_holder_metrics(e, ctx);

    let Some(built) = &v.built else {
        return Ok(());
    };
    let mut vip_traffic = Vec::with_capacity(built.vips.len());
    for bv in &built.vips {
        vip_traffic.push(since_baseline(
            ctx.reader.vip_traffic(bv.id)?,
            v.vip_baselines.get(&bv.id),
        ));
    }
    e.family(
        "stator_vip_packets_total",
        Kind::Counter,
        "Packets that matched a VIP.",
    );
    for (vip, t) in v.config.vips.iter().zip(&vip_traffic) {
        e.sample(&[("vip", &vip.name)], t.packets as f64);
    }
    e.family(
        "stator_vip_bytes_total",
        Kind::Counter,
        "Bytes (frames as received) that matched a VIP.",
    );
    for (vip, t) in v.config.vips.iter().zip(&vip_traffic) {
        e.sample(&[("vip", &vip.name)], t.bytes as f64);
    }
    let mut real_traffic = Vec::new();
    for (vip, bv) in v.config.vips.iter().zip(&built.vips) {
        for r in &bv.reals {
            let t = since_baseline(ctx.reader.real_traffic(r.id)?, v.real_baselines.get(&r.id));
            real_traffic.push((
                &vip.name,
                &v.config.backend(r.backend).name,
                t,
                r,
                vip.table_size,
            ));
        }
    }
    e.family(
        "stator_backend_packets_total",
        Kind::Counter,
        "Packets encapsulated to a backend of a VIP.",
    );
    for (vip, backend, t, _, _) in &real_traffic {
        e.sample(&[("vip", vip), ("backend", backend)], t.packets as f64);
    }
    e.family(
        "stator_backend_bytes_total",
        Kind::Counter,
        "Bytes (frames as received) encapsulated to a backend of a VIP.",
    );
    for (vip, backend, t, _, _) in &real_traffic {
        e.sample(&[("vip", vip), ("backend", backend)], t.bytes as f64);
    }
    e.family(
        "stator_backend_table_share",
        Kind::Gauge,
        "Fraction of the VIP's Maglev slots the backend holds.",
    );
    for (vip, backend, _, r, size) in &real_traffic {
        e.sample(
            &[("vip", vip), ("backend", backend)],
            f64::from(r.slots) / f64::from(*size),
        );
    }
    e.family(
        "stator_backend_usable",
        Kind::Gauge,
        "1 while the backend is in the VIP's Maglev table.",
    );
    for (vip, backend, _, r, _) in &real_traffic {
        e.sample(
            &[("vip", vip), ("backend", backend)],
            b(r.plan == stator_control::plan::RealPlan::Usable),
        );
    }
    e.family(
        "stator_vip_usable_backends",
        Kind::Gauge,
        "Backends in the VIP's Maglev table.",
    );
    for (vip, bv) in v.config.vips.iter().zip(&built.vips) {
        e.sample(&[("vip", &vip.name)], bv.usable() as f64);
    }
    Ok(())
}

/// The families of the data plane's global counters, with their help, in the order they are
/// written. Where each counter goes is [`Counter::exported`], beside the counter.
const COUNTER_FAMILIES: [(&str, &str); 12] = [
    (
        "stator_packets_total",
        "Packets by the action taken (every packet ends in one).",
    ),
    (
        "stator_conntrack_lookups_total",
        "Connection-table lookups, by result.",
    ),
    (
        "stator_conntrack_inserts_total",
        "Connection-table entries written after a Maglev decision.",
    ),
    (
        "stator_conntrack_guard_total",
        "Inserts skipped by the SYN-flood guard.",
    ),
    (
        "stator_passed_packets_total",
        "Packets handed to the kernel, by why.",
    ),
    (
        "stator_icmp_total",
        "ICMP handled in the data plane, by kind.",
    ),
    (
        "stator_self_test_packets_total",
        "Self-test probes the program answered.",
    ),
    (
        "stator_fragments_total",
        "Fragments: sent to their 3-tuple owner, first fragments recorded, others forwarded by \
         their record.",
    ),
    (
        "stator_redirects_total",
        "Redirects between Stator nodes: received, sent to a failover address, and refused \
         because the packet had been redirected already.",
    ),
    (
        "stator_group_matches_total",
        "VIP matches by prefix group and suffix.",
    ),
    (
        "stator_trace_reports_total",
        "Traced packets: reported, not reported (rate limit), lost (ring full), and marks \
         whose MAC no tracer key verifies (not traced: forwarded as ordinary traffic).",
    ),
    (
        "stator_second_chance_total",
        "Packets that missed the connection table and whose previous Maglev table names another \
         backend: sent with a second chance naming it, or not (the VIP is not GUE, or the \
         families differ).",
    ),
];

/// Every global counter, each in its family ([`Counter::exported`]).
fn counter_families(e: &mut Exposition, c: &stator_plane::PlaneCounters) {
    for (family, help) in COUNTER_FAMILIES {
        e.family(family, Kind::Counter, help);
        for counter in Counter::ALL {
            let x = counter.exported();
            if x.family == family {
                let labels: &[(&str, &str)] = match &x.label {
                    Some(l) => std::slice::from_ref(l),
                    None => &[],
                };
                e.sample(labels, c.get(counter) as f64);
            }
        }
    }
}

/// The tracer's sends (docs/forwarding.md §11) and the holder of early fragments (§9).
fn tracer_holder_metrics(e: &mut Exposition, ctx: &Ctx) {
    let t = &ctx.tracer;
    e.family(
        "stator_trace_sends_total",
        Kind::Counter,
        "The tracer's reports as the node sends them: sent; not sent because the receiver is \
         outside tracer.receivers, the report would be longer than the traced packet, the \
         receiver is unusable, or the socket refused it.",
    );
    for (result, n) in [
        ("sent", &t.sent),
        ("receiver_refused", &t.receiver_refused),
        ("oversize", &t.oversize),
        ("invalid", &t.invalid),
        ("failed", &t.failed),
    ] {
        e.sample(
            &[("result", result)],
            n.load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
    }
    if let Some(h) = ctx.reader.hold_stats() {
        e.family(
            "stator_hold_frames_total",
            Kind::Counter,
            "Early fragments: held, sent on once their first arrived, dropped after the timeout, \
             dropped because the holder was full.",
        );
        for (event, n) in [
            ("held", h.queue.held),
            ("released", h.queue.released),
            ("expired", h.queue.expired),
            ("full", h.queue.full),
        ] {
            e.sample(&[("event", event)], n as f64);
        }
        e.family(
            "stator_hold_frames",
            Kind::Gauge,
            "Early fragments held now.",
        )
        .sample(&[], h.holding as f64);
    }
}

fn health_metrics(e: &mut Exposition, ctx: &Ctx, v: &View) {
    e.family(
        "stator_backend_up",
        Kind::Gauge,
        "1 while every health check of the backend is up.",
    );
    for (backend, bv) in v.config.backends.iter().zip(&v.backends) {
        e.sample(&[("backend", &backend.name)], b(bv.health == Health::Up));
    }
    e.family(
        "stator_backend_draining",
        Kind::Gauge,
        "1 while the backend is drained through the API (before or after its timeout).",
    );
    for (backend, bv) in v.config.backends.iter().zip(&v.backends) {
        e.sample(
            &[("backend", &backend.name)],
            b(bv.drain != DrainView::None),
        );
    }
    e.family(
        "stator_backend_transitions_total",
        Kind::Counter,
        "Backend health changes, by the state changed to.",
    );
    for (backend, bv) in v.config.backends.iter().zip(&v.backends) {
        e.sample(
            &[("backend", &backend.name), ("to", "up")],
            bv.transitions_up as f64,
        );
        e.sample(
            &[("backend", &backend.name), ("to", "down")],
            bv.transitions_down as f64,
        );
    }
    let checks = ctx.board.statuses();
    let labels = check_labels(checks.iter().map(|(k, _)| k));
    e.family(
        "stator_health_check_up",
        Kind::Gauge,
        "1 up, 0 down, -1 not known yet, per deduplicated check.",
    );
    for (k, s) in &checks {
        let state = match s.state {
            "up" => 1.0,
            "down" => 0.0,
            _ => -1.0,
        };
        e.sample(&[("check", &labels[k])], state);
    }
    e.family(
        "stator_health_probes_total",
        Kind::Counter,
        "Health probes, by result.",
    );
    for (k, s) in &checks {
        let url = &labels[k];
        e.sample(&[("check", url), ("result", "success")], s.probes_ok as f64);
        e.sample(
            &[("check", url), ("result", "failure")],
            s.probes_failed as f64,
        );
    }
    e.family(
        "stator_health_check_transitions_total",
        Kind::Counter,
        "Health-check state changes, by the state changed to.",
    );
    for (k, s) in &checks {
        let url = &labels[k];
        e.sample(&[("check", url), ("to", "up")], s.transitions_up as f64);
        e.sample(&[("check", url), ("to", "down")], s.transitions_down as f64);
    }
}

fn bgp_metrics(e: &mut Exposition, ctx: &Ctx, v: &View) {
    let a = announcer_status(ctx);
    e.family(
        "stator_vip_announce",
        Kind::Gauge,
        "1 while the node wants the VIP announced (forwarder healthy, a usable backend).",
    );
    for (vip, want) in v.config.vips.iter().zip(&v.announce) {
        e.sample(&[("vip", &vip.name)], b(*want));
    }
    let Some(a) = a else {
        return;
    };
    e.family(
        "stator_vip_announced",
        Kind::Gauge,
        "1 while BIRD offers the VIP's route to the BGP sessions.",
    );
    for vip in &v.config.vips {
        e.sample(&[("vip", &vip.name)], b(a.announced(vip.key.addr)));
    }
    e.family(
        "stator_bird_up",
        Kind::Gauge,
        "1 when the last pass reached BIRD's control socket.",
    )
    .sample(&[], b(a.bird_reachable));
    e.family(
        "stator_bgp_session_established",
        Kind::Gauge,
        "1 while the BGP session is established.",
    );
    for s in &a.sessions {
        e.sample(&[("neighbor", &s.name)], b(s.established));
    }
    e.family(
        "stator_bgp_route_changes_total",
        Kind::Counter,
        "VIP routes announced or withdrawn through BIRD.",
    )
    .sample(&[("change", "announce")], a.counters.announcements as f64)
    .sample(&[("change", "withdraw")], a.counters.withdrawals as f64);
    e.family(
        "stator_bgp_errors_total",
        Kind::Counter,
        "Announcer passes that failed (BIRD unreachable, a refused command).",
    )
    .sample(&[], a.counters.errors as f64);
}

/// The `check` label of each check: its URL (`http://10.1.1.11:80/healthz`), and when
/// several checks share a URL (other expected statuses, `Host`, payload or timings), the URL
/// with `#` and a digest of the whole check, so that every series stays unique.
pub fn check_labels<'a>(keys: impl Iterator<Item = &'a CheckKey>) -> BTreeMap<CheckKey, String> {
    let keys: Vec<&CheckKey> = keys.collect();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for k in &keys {
        *count.entry(k.url()).or_default() += 1;
    }
    keys.into_iter()
        .map(|k| {
            let url = k.url();
            let label = if count[&url] > 1 {
                // FNV-1a of the check's full description: stable across runs and builds.
                let digest = format!("{k:?}")
                    .bytes()
                    .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                    });
                format!("{url}#{:08x}", digest as u32)
            } else {
                url
            };
            (k.clone(), label)
        })
        .collect()
}

/// `GET /metrics`.
pub async fn handler(State(ctx): State<Ctx>) -> Result<Response, ApiError> {
    let text = tokio::task::spawn_blocking(move || render(&ctx))
        .await
        .map_err(|e| ControlError::io("metrics", std::io::Error::other(e.to_string())))??;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_is_exported_once_in_a_family_with_help() {
        let mut seen = std::collections::BTreeSet::new();
        for counter in Counter::ALL {
            let x = counter.exported();
            assert!(
                COUNTER_FAMILIES.iter().any(|(f, _)| *f == x.family),
                "{counter:?}: family {} has no help here",
                x.family
            );
            assert!(
                seen.insert((x.family, x.label)),
                "{counter:?} exported twice"
            );
            let same_family = Counter::ALL
                .iter()
                .filter(|c| c.exported().family == x.family)
                .count();
            assert_eq!(
                x.label.is_none(),
                same_family == 1,
                "{counter:?}: a label exactly when its family has several counters"
            );
        }
        for (family, _) in COUNTER_FAMILIES {
            assert!(
                Counter::ALL.iter().any(|c| c.exported().family == family),
                "{family} holds no counter"
            );
        }
    }

    #[test]
    fn checks_sharing_a_url_get_distinct_labels() {
        use stator_config::{HttpProbe, Probe, StatusRange, Timing};
        use std::time::Duration;
        let timing = Timing {
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            jitter: Duration::ZERO,
        };
        let http = |first| {
            Probe::Http(HttpProbe {
                path: "/healthz".into(),
                expect_status: StatusRange { first, last: 399 },
                host: None,
            })
        };
        let key = |probe, port| CheckKey {
            address: "10.0.0.1".parse().unwrap(),
            port,
            probe,
            timing,
        };
        let (a, b, c) = (key(http(200), 80), key(http(300), 80), key(Probe::Tcp, 81));
        let labels = check_labels([&a, &b, &c].into_iter());
        assert_eq!(labels[&c], "tcp://10.0.0.1:81");
        assert!(labels[&a].starts_with("http://10.0.0.1:80/healthz#"));
        assert_ne!(labels[&a], labels[&b]);
        assert_eq!(
            check_labels([&a].into_iter())[&a],
            "http://10.0.0.1:80/healthz"
        );
    }

    #[test]
    fn escapes_and_values() {
        let mut e = Exposition::new();
        e.family("x_total", Kind::Counter, "a \\ help\nline")
            .sample(&[("l", "a\"b\\c\nd")], 3.0)
            .sample(&[], 0.25);
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP x_total a \\\\ help\\nline\n# TYPE x_total counter\n\
             x_total{l=\"a\\\"b\\\\c\\nd\"} 3\nx_total 0.25\n"
        );
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(1e20), "100000000000000000000");
    }
}
