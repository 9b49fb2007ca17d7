//! The proxy tier's families (`stator_proxy_*`): per listener, per upstream backend, and the
//! UDP listeners' datagrams, sessions and drops (docs/operations.md, docs/proxy.md).

use super::{Ctx, Exposition, Kind, b, format_value};

pub(super) fn proxy_metrics(e: &mut Exposition, ctx: &Ctx) {
    use std::sync::atomic::Ordering::Relaxed;
    let listeners = ctx.proxy.lock().listeners();
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Relaxed) as f64;
    e.family(
        "stator_proxy_reload_failures_total",
        Kind::Counter,
        "Reloads whose listeners could not all be applied (a port in use).",
    )
    .sample(&[], ctx.proxy.reload_failures.load(Relaxed) as f64);
    let access = ctx.proxy.access.counts();
    e.family(
        "stator_access_log_lines_total",
        Kind::Counter,
        "Access-log lines, by result: written, or dropped (the writer was behind, or a write \
         failed).",
    )
    .sample(&[("result", "written")], access.written as f64)
    .sample(&[("result", "dropped")], access.dropped as f64);
    e.family(
        "stator_access_log_write_errors_total",
        Kind::Counter,
        "Writes of the access log that failed (a full disk, a closed pipe).",
    )
    .sample(&[], access.errors as f64);
    descriptor_metrics(e, ctx);
    if let Some(rss) = ctx.proxy.receive_counters() {
        e.family(
            "stator_receive_steering_packets_total",
            Kind::Counter,
            "Packets seen by the receive-steering program ([receive_steering]), by the CPU it \
             ran on and outcome: local (already on its worker's CPU), redirected (sent there), \
             no_cpu, other (not to a steered port), malformed. In generic mode a redirected \
             packet is seen again, as local, on its new CPU.",
        );
        for (cpu, counts) in rss {
            let cpu = cpu.to_string();
            for (label, v) in counts {
                e.sample(&[("cpu", &cpu), ("outcome", label)], v as f64);
            }
        }
    }
    if listeners.is_empty() {
        return;
    }
    if listeners.iter().any(|l| !l.steering.is_empty()) {
        e.family(
            "stator_proxy_steering_decisions_total",
            Kind::Counter,
            "Runs of a listener's reuseport steering program (steering = \"source\" or \"cpu\"), \
             by outcome (select_own, select_probe, select_kernel, migrate_*, no_address, \
             not_configured) and, for \"cpu\", cpu_local / cpu_remote: whether a selection ran \
             on its worker's CPU.",
        );
        for l in &listeners {
            for (label, v) in &l.steering {
                e.sample(&[("listener", &l.spec.name), ("outcome", label)], *v as f64);
            }
        }
    }
    crate::udp_metrics::udp_metrics(e, &listeners);
    e.family(
        "stator_proxy_workers",
        Kind::Gauge,
        "Worker threads of a listener.",
    );
    for l in &listeners {
        e.sample(&[("listener", &l.spec.name)], l.workers as f64);
    }
    e.family(
        "stator_proxy_connections_total",
        Kind::Counter,
        "Client connections accepted by a listener.",
    );
    for l in &listeners {
        e.sample(&[("listener", &l.spec.name)], n(&l.stats.connections));
    }
    e.family(
        "stator_proxy_connections_active",
        Kind::Gauge,
        "Client connections open on a listener.",
    );
    for l in &listeners {
        e.sample(&[("listener", &l.spec.name)], n(&l.stats.active));
    }
    e.family(
        "stator_proxy_requests_total",
        Kind::Counter,
        "HTTP requests received by a listener.",
    );
    for l in &listeners {
        e.sample(&[("listener", &l.spec.name)], n(&l.stats.requests));
    }
    e.family(
        "stator_proxy_responses_total",
        Kind::Counter,
        "HTTP responses sent by a listener, by status class.",
    );
    for l in &listeners {
        for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
            e.sample(
                &[("listener", &l.spec.name), ("code", class)],
                n(&l.stats.responses[i]),
            );
        }
    }
    e.family(
        "stator_proxy_bytes_total",
        Kind::Counter,
        "Bytes between clients and a listener, by direction (in = from clients).",
    );
    for l in &listeners {
        e.sample(
            &[("listener", &l.spec.name), ("direction", "in")],
            n(&l.stats.bytes_in),
        );
        e.sample(
            &[("listener", &l.spec.name), ("direction", "out")],
            n(&l.stats.bytes_out),
        );
    }
    e.family(
        "stator_proxy_client_errors_total",
        Kind::Counter,
        "Client-side failures of a listener, by kind.",
    );
    for l in &listeners {
        for k in stator_proxy::ClientErrorKind::ALL {
            e.sample(
                &[("listener", &l.spec.name), ("kind", k.label())],
                l.stats.client_errors(k) as f64,
            );
        }
    }
    e.family(
        "stator_proxy_retries_total",
        Kind::Counter,
        "Further upstreams tried: after a connect failure (reason connect), or an idempotent \
         request sent again after its upstream failed before the response head (resent).",
    );
    for l in &listeners {
        e.sample(
            &[("listener", &l.spec.name), ("reason", "connect")],
            n(&l.stats.retries),
        );
        e.sample(
            &[("listener", &l.spec.name), ("reason", "resent")],
            n(&l.stats.retries_resent),
        );
    }
    e.family(
        "stator_proxy_session_hits_total",
        Kind::Counter,
        "Requests or connections sent to the backend a client's session named.",
    );
    for l in &listeners {
        e.sample(&[("listener", &l.spec.name)], n(&l.stats.session_hits));
    }
    e.family(
        "stator_proxy_session_evictions_total",
        Kind::Counter,
        "Session-table entries evicted because a worker's table was full.",
    );
    for l in &listeners {
        e.sample(&[("listener", &l.spec.name)], n(&l.stats.session_evictions));
    }
    e.family(
        "stator_proxy_request_duration_seconds",
        Kind::Histogram,
        "HTTP requests (to the end of the response) or TCP connections, by listener.",
    );
    for l in &listeners {
        let (buckets, sum) = l.stats.duration.snapshot();
        for (i, count) in buckets.iter().enumerate() {
            let le = stator_proxy::DURATION_BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| format_value(*b));
            e.sample_suffixed(
                "_bucket",
                &[("listener", &l.spec.name), ("le", &le)],
                *count as f64,
            );
        }
        e.sample_suffixed("_sum", &[("listener", &l.spec.name)], sum);
        e.sample_suffixed(
            "_count",
            &[("listener", &l.spec.name)],
            buckets.last().copied().unwrap_or(0) as f64,
        );
    }
    let ups: Vec<(&str, &stator_proxy::UpstreamView)> = listeners
        .iter()
        .flat_map(|l| l.upstreams.iter().map(move |u| (l.spec.name.as_str(), u)))
        .collect();
    e.family(
        "stator_proxy_backend_usable",
        Kind::Gauge,
        "1 while the listener picks the backend for new work.",
    );
    for (l, u) in &ups {
        let usable = u.state == stator_proxy::UpstreamState::Usable;
        e.sample(&[("listener", l), ("backend", &u.spec.name)], b(usable));
    }
    e.family(
        "stator_proxy_backend_excluded",
        Kind::Gauge,
        "1 while the listener leaves the backend out of picks after failures (passive health: \
         max_fails within fail_timeout), whatever the active checks say.",
    );
    for (l, u) in &ups {
        e.sample(
            &[("listener", l), ("backend", &u.spec.name)],
            b(u.excluded_for.is_some()),
        );
    }
    e.family(
        "stator_proxy_backend_exclusions_total",
        Kind::Counter,
        "Times the listener left the backend out of picks after failures (passive health).",
    );
    for (l, u) in &ups {
        e.sample(
            &[("listener", l), ("backend", &u.spec.name)],
            u.stats
                .passive_excluded
                .load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
    }
    for (name, kind, help, field) in [
        (
            "stator_proxy_backend_connections_total",
            Kind::Counter,
            "Connections the listener opened to a backend.",
            0,
        ),
        (
            "stator_proxy_backend_connections_active",
            Kind::Gauge,
            "Connections to a backend open now (kept-alive idle ones included).",
            1,
        ),
        (
            "stator_proxy_backend_active",
            Kind::Gauge,
            "Requests (HTTP) or client connections (TCP) a backend is serving now.",
            2,
        ),
        (
            "stator_proxy_backend_requests_total",
            Kind::Counter,
            "Requests (HTTP) or client connections (TCP) sent to a backend.",
            3,
        ),
        (
            "stator_proxy_backend_reused_total",
            Kind::Counter,
            "Requests sent to a backend over a kept-alive connection.",
            4,
        ),
    ] {
        e.family(name, kind, help);
        for (l, u) in &ups {
            let s = &u.stats;
            let v = match field {
                0 => n(&s.connects),
                1 => f64::from(s.open.load(Relaxed)),
                2 => f64::from(s.active.load(Relaxed)),
                3 => n(&s.requests),
                _ => n(&s.reused),
            };
            e.sample(&[("listener", l), ("backend", &u.spec.name)], v);
        }
    }
    e.family(
        "stator_proxy_backend_bytes_total",
        Kind::Counter,
        "Bytes between the listener and a backend, by direction (in = from the backend).",
    );
    for (l, u) in &ups {
        let labels = |d| {
            [
                ("listener", *l),
                ("backend", u.spec.name.as_str()),
                ("direction", d),
            ]
        };
        e.sample(&labels("in"), n(&u.stats.bytes_in));
        e.sample(&labels("out"), n(&u.stats.bytes_out));
    }
    e.family(
        "stator_proxy_backend_errors_total",
        Kind::Counter,
        "Failures of a backend seen by the listener, by kind.",
    );
    for (l, u) in &ups {
        for k in stator_proxy::ErrorKind::ALL {
            e.sample(
                &[
                    ("listener", l),
                    ("backend", &u.spec.name),
                    ("kind", k.label()),
                ],
                u.stats.errors(k) as f64,
            );
        }
    }
}

/// The node's descriptors and the proxy tier's budget (docs/operations.md, "Descriptors and
/// floods").
fn descriptor_metrics(e: &mut Exposition, ctx: &Ctx) {
    let d = &ctx.proxy.descriptors;
    let sizing = d.sizing();
    e.family(
        "stator_descriptors",
        Kind::Gauge,
        "File descriptors of the process: its limit (RLIMIT_NOFILE), open now, and reserved from the proxy tier (health checks, the admin API, BIRD, listener sockets, the process at start, a spare).",
    );
    if let Some(limit) = sizing.limit {
        e.sample(&[("kind", "limit")], limit as f64);
    }
    if let Ok(open) = stator_sys::limits::open_fds() {
        e.sample(&[("kind", "open")], open as f64);
    }
    e.sample(&[("kind", "reserved")], sizing.reserve as f64);
    let b = &d.budget;
    e.family(
        "stator_proxy_descriptors",
        Kind::Gauge,
        "The proxy tier's descriptor budget (the limit less the reserve), the descriptors its connections and sessions hold now, and the most they held at once.",
    );
    if b.capacity() != u64::MAX {
        e.sample(&[("kind", "budget")], b.capacity() as f64);
    }
    e.sample(&[("kind", "used")], b.used() as f64);
    e.sample(&[("kind", "peak")], b.peak() as f64);
    e.family(
        "stator_proxy_descriptors_refused_total",
        Kind::Counter,
        "Connections, upstream connections and sessions refused because the budget was spent (each listener counts its own under the reason descriptors).",
    )
    .sample(&[], b.refused() as f64);
}
