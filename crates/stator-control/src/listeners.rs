//! The proxy tier of a node: `[[listener]]` tables become [`stator_proxy::ListenerSpec`]s,
//! backend health and drains become [`UpstreamState`]s, and a task keeps the running
//! [`Proxy`] in step with every [`View`] the reconciler publishes — a new configuration is
//! applied to the listeners (swapped under running workers, see `stator_proxy::Proxy::apply`),
//! a health change flips upstreams in place, at once.
//!
//! One health state per backend: a listener's upstream is usable exactly when the backend is
//! healthy and not drained (the same rule that puts a backend in a VIP's Maglev table), and
//! draining (no new requests, existing connections kept) while drained before its timeout.
//!
//! A reload binds the sockets of its new and changed listeners before it commits anything
//! ([`ProxyTier::prepare`], called by the reconciler): a port taken refuses the reload with the
//! listener's field path (`listener[0].address: …`) and the running configuration and
//! listeners keep serving. After the data plane commits, the prepared listeners start
//! ([`ProxyTier::commit`]); what can still fail there (a worker thread that cannot start) is
//! logged and counted (`stator_proxy_reload_failures_total`).

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::time::Instant;

use stator_config::Config;
use stator_config::types::ReceiveXdpMode;
use stator_proxy::{
    AccessLog, AccessLogSpec, HttpSpec, ListenerSpec, PersistenceSpec, Prepared, Proxy, ProxyError,
    SourcePrefixes, SourceSteering, SteeringGroup, UdpSpec, UpstreamSpec, UpstreamState,
};
use stator_steer::ReceiveSteering;
use tokio::sync::watch;

use crate::descriptors::{NodeDescriptors, Sizing};
use crate::error::ControlError;
use crate::plan::Health;
use crate::view::{DrainView, View};

/// A listener that cannot start, as an error naming its field (`listener[2].address`).
pub fn listener_error(config: &Config, e: &ProxyError) -> ControlError {
    let (listener, what) = match e {
        ProxyError::Bind { listener, .. } => (listener.as_str(), "address"),
        ProxyError::Steering { listener, .. } => (listener.as_str(), "steering"),
        ProxyError::Scheduler { listener, .. } => (listener.as_str(), "scheduler"),
        ProxyError::Worker { listener, .. } => (listener.as_str(), "workers"),
        _ => ("", "address"),
    };
    let field = match config.listeners.iter().position(|l| l.name == listener) {
        Some(i) => format!("listener[{i}].{what}"),
        None => "listener".to_owned(),
    };
    ControlError::Host {
        field,
        reason: e.to_string(),
    }
}

/// The node's proxy, shared by the API and the task that follows the views.
#[derive(Debug, Clone)]
pub struct ProxyTier {
    proxy: Arc<Mutex<Proxy>>,
    /// `[receive_steering]`, loaded at start ([`ProxyTier::start_receive_steering`]) and
    /// removed from its interfaces at shutdown.
    receive: Arc<Mutex<Option<ReceiveSteering>>>,
    /// Reloads whose listeners could not all be applied.
    pub reload_failures: Arc<AtomicU64>,
    /// Keys handed over by the process this one replaces: per listener, and receive
    /// steering's ([`ProxyTier::inherit_keys`]).
    keys: Arc<Mutex<std::collections::BTreeMap<String, stator_steer::RssKey>>>,
    receive_key: Arc<Mutex<Option<stator_steer::RssKey>>>,
    /// The descriptors its workers draw from, and how they were sized.
    pub descriptors: Arc<NodeDescriptors>,
    /// The node's access log (`[access_log]`).
    pub access: Arc<AccessLog>,
}

/// The steering programs' keys, handed to a process that replaces this one
/// ([`ProxyTier::steering_keys`], [`ProxyTier::inherit_keys`]): a client reaches the same
/// worker index in both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SteeringKeys {
    /// Each steered listener's key (40 bytes), by listener name.
    pub listeners: Vec<(String, Vec<u8>)>,
    /// Receive steering's key.
    pub receive: Option<Vec<u8>>,
}

/// A reload's listeners, bound and not yet running, with the descriptor budget they come
/// with ([`ProxyTier::prepare`]).
#[derive(Debug)]
pub struct PreparedListeners {
    proxy: Prepared,
    sizing: Sizing,
    access: Option<AccessLogSpec>,
}

impl ProxyTier {
    /// A proxy tier with no listener yet (and an unlimited budget until
    /// [`NodeDescriptors::start`] sizes it).
    pub fn new(node: &str) -> Self {
        let receive = Arc::new(Mutex::new(None));
        let keys = Arc::default();
        let steering: Arc<dyn SourceSteering> = Arc::new(KernelSteering {
            receive: Arc::clone(&receive),
            keys: Arc::clone(&keys),
        });
        let descriptors = Arc::new(NodeDescriptors::default());
        let access = AccessLog::new();
        let proxy = Proxy::new(node, Some(steering))
            .with_budget(Arc::clone(&descriptors.budget))
            .with_access_log(Arc::clone(&access));
        Self {
            proxy: Arc::new(Mutex::new(proxy)),
            receive,
            reload_failures: Arc::default(),
            keys,
            receive_key: Arc::default(),
            descriptors,
            access,
        }
    }

    /// Runs `config`'s access log (at the start; a reload's goes through
    /// [`ProxyTier::prepare`] and [`ProxyTier::commit`]). The error names the field.
    pub fn start_access_log(&self, config: &Config) -> Result<(), ControlError> {
        self.access
            .configure(access_spec(config))
            .map_err(|e| access_error(&e))
    }

    /// Loads `config`'s `[receive_steering]` and attaches it to its interfaces (at the start:
    /// a change needs a restart). The error names the field.
    pub fn start_receive_steering(&self, config: &Config) -> Result<(), ControlError> {
        let Some(r) = &config.receive_steering else {
            return Ok(());
        };
        let host = |field: String, e: stator_steer::SteerError| ControlError::Host {
            field,
            reason: e.to_string(),
        };
        let allowed = stator_sys::cpu::allowed_cpus().unwrap_or_default();
        if let Some(cpus) = &r.cpus
            && let Some((i, cpu)) = cpus
                .iter()
                .enumerate()
                .find(|(_, c)| !allowed.contains(&(**c as usize)))
        {
            return Err(ControlError::Host {
                field: format!("receive_steering.cpus[{i}]"),
                reason: format!(
                    "CPU {cpu} is not one this node may run on ({allowed:?}): its worker could \
                     not be pinned there"
                ),
            });
        }
        let mut rss = ReceiveSteering::load(&stator_steer::ReceiveOptions {
            queue_size: r.queue_size,
            key: *lock(&self.receive_key),
            ..stator_steer::ReceiveOptions::new(receive_cpus(r))
        })
        .map_err(|e| host("receive_steering".into(), e))?;
        let mode = match r.xdp_mode {
            ReceiveXdpMode::Generic => stator_steer::RssAttachMode::Generic,
            ReceiveXdpMode::Native => stator_steer::RssAttachMode::Native,
        };
        for (i, name) in r.interfaces.iter().enumerate() {
            rss.attach(name, mode)
                .map_err(|e| host(format!("receive_steering.interfaces[{i}]"), e))?;
        }
        tracing::info!(interfaces = ?r.interfaces, cpus = ?rss.cpus(), mode = r.xdp_mode.as_str(),
                       "receive steering attached");
        *lock(&self.receive) = Some(rss);
        Ok(())
    }

    /// The receive-steering program's counters by CPU, each by label, CPUs where it never
    /// ran left out (`None`: no `[receive_steering]`).
    pub fn receive_counters(&self) -> Option<Vec<(usize, Labelled)>> {
        let counters = lock(&self.receive).as_ref()?.counters().ok()?;
        Some(
            counters
                .per_cpu
                .iter()
                .enumerate()
                .filter(|(_, c)| c.iter().any(|&v| v > 0))
                .map(|(cpu, c)| {
                    let labelled = stator_steer::RssCounter::ALL
                        .iter()
                        .map(|k| (k.label(), c[k.index() as usize]))
                        .collect();
                    (cpu, labelled)
                })
                .collect(),
        )
    }

    /// The steering keys a successor needs to send every client to the same worker index as
    /// here: each steered listener's, and receive steering's.
    pub fn steering_keys(&self) -> SteeringKeys {
        SteeringKeys {
            listeners: self.lock().steering_keys(),
            receive: lock(&self.receive)
                .as_ref()
                .map(|r| r.table().key().bytes().to_vec()),
        }
    }

    /// Keys handed over by the process this one replaces (before its listeners and receive
    /// steering start): a client reaches the same worker index here as there. A key that is
    /// not 40 bytes is ignored (a new one is drawn).
    pub fn inherit_keys(&self, keys: SteeringKeys) {
        let key = |b: Vec<u8>| <[u8; 40]>::try_from(b).ok().map(stator_steer::RssKey::new);
        lock(&self.keys).extend(
            keys.listeners
                .into_iter()
                .filter_map(|(name, b)| Some((name, key(b)?))),
        );
        *lock(&self.receive_key) = keys.receive.and_then(key);
    }

    /// Before handing the listeners' sockets to a successor (an upgrade): lets go of them in
    /// the steering programs' maps and detaches receive steering from its interfaces, so that
    /// the successor can steer with its own programs. Errors are logged.
    pub fn release_steering(&self) {
        self.lock().release_steering();
        if let Some(r) = lock(&self.receive).as_mut()
            && let Err(e) = r.detach_all()
        {
            tracing::warn!(error = %e, "receive steering: detaching for the successor");
        }
    }

    /// The successor did not start: steering as before [`ProxyTier::release_steering`]. Errors
    /// are logged.
    pub fn reclaim_steering(&self) {
        if let Some(r) = lock(&self.receive).as_mut()
            && let Err(e) = r.attach_again()
        {
            tracing::warn!(error = %e, "receive steering: attaching again");
        }
        self.lock().reclaim_steering();
    }

    /// Opens the access log's file again by its name (`SIGUSR1`, after logrotate moved it).
    pub fn reopen_access_log(&self) -> std::io::Result<()> {
        self.access.reopen()
    }

    /// The proxy (held briefly: the API reads counters through it).
    pub fn lock(&self) -> MutexGuard<'_, Proxy> {
        // A panicked holder leaves a consistent proxy: every change is applied whole.
        self.proxy.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies the listeners of `view`'s configuration and its backend states.
    pub fn apply(&self, view: &View) -> Result<(), stator_proxy::ProxyError> {
        let mut proxy = self.lock();
        let result = proxy.apply(specs(&view.config));
        set_states(&proxy, view);
        result
    }

    /// The first phase of a reload to `config`: the descriptor budget sized for it (refused
    /// where the start would be), new and changed listeners bound, schedulers built, steering
    /// loaded — nothing running changes. The error names the listener's field.
    pub fn prepare(&self, config: &Config) -> Result<PreparedListeners, ControlError> {
        let sizing = self.descriptors.plan(config, default_workers())?;
        let access = access_spec(config);
        if let Some(spec) = &access {
            AccessLog::check(spec).map_err(|e| access_error(&e))?;
        }
        let proxy = self
            .lock()
            .prepare(specs(config))
            .map_err(|e| listener_error(config, &e))?;
        Ok(PreparedListeners {
            proxy,
            sizing,
            access,
        })
    }

    /// The second phase: the budget resized and the prepared listeners run (states follow
    /// with the next view).
    pub fn commit(&self, prepared: PreparedListeners) {
        self.descriptors.apply(prepared.sizing);
        if let Err(e) = self.access.configure(prepared.access) {
            self.reload_failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, "access log: reload not applied; the log stays as it was");
        }
        if let Err(e) = self.lock().commit(prepared.proxy) {
            self.reload_failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, "listeners: reload not fully applied");
        }
    }

    /// Follows the views: backend states on every view (a reload's listeners are applied by
    /// the reconciler, through [`ProxyTier::prepare`] and [`ProxyTier::commit`]).
    pub fn follow(&self, mut views: watch::Receiver<Arc<View>>) -> tokio::task::JoinHandle<()> {
        let tier = self.clone();
        tokio::spawn(async move {
            while views.changed().await.is_ok() {
                let view = Arc::clone(&views.borrow_and_update());
                set_states(&tier.lock(), &view);
            }
        })
    }

    /// Stops every listener (sockets closed, connections given up to `limit`).
    pub fn shutdown(&self, limit: std::time::Duration) {
        let proxy = std::mem::replace(&mut *self.lock(), Proxy::new("", None));
        proxy.shutdown(limit);
        // detaches the receive-steering program from its interfaces
        lock(&self.receive).take();
    }
}

/// The proxy's access-log spec of `config`'s `[access_log]`.
pub fn access_spec(config: &Config) -> Option<AccessLogSpec> {
    config.access_log.as_ref().map(|a| AccessLogSpec {
        path: a.path.clone(),
        format: a.format,
        sample: f64::from(a.sample_per_million) / 1e6,
    })
}

fn access_error(e: &std::io::Error) -> ControlError {
    ControlError::Host {
        field: "access_log.path".into(),
        reason: format!("cannot open the access log for appending: {e}"),
    }
}

/// Counters by metric label.
pub type Labelled = Vec<(&'static str, u64)>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The CPUs of `[receive_steering]`: as configured, else every CPU the node may run on.
pub fn receive_cpus(r: &stator_config::types::ReceiveSteering) -> Vec<u32> {
    r.cpus.clone().unwrap_or_else(|| {
        stator_sys::cpu::allowed_cpus()
            .unwrap_or_default()
            .into_iter()
            .map(|c| c as u32)
            .collect()
    })
}

/// `steering = "source"`: `stator-steer`'s `SK_REUSEPORT` program, one per listener;
/// `"cpu"`: the same program with the node's receive steering's key, table and CPUs.
#[derive(Debug)]
struct KernelSteering {
    receive: Arc<Mutex<Option<ReceiveSteering>>>,
    /// Keys handed over by the process this one replaces, by listener ([`ProxyTier::inherit_keys`]).
    keys: Arc<Mutex<std::collections::BTreeMap<String, stator_steer::RssKey>>>,
}

/// Worker ids a group can hold: room for reloads that add workers (a live id without a
/// socket falls back to the next table slot, counted by the program).
const STEERING_CAPACITY: usize = 64;

impl SourceSteering for KernelSteering {
    fn group(&self, spec: &ListenerSpec, workers: usize) -> Result<Box<dyn SteeringGroup>, String> {
        let options = if spec.steering == stator_proxy::Steering::Cpu {
            let mut receive = lock(&self.receive);
            let Some(rss) = receive.as_mut() else {
                return Err(
                    "no receive steering is running: [receive_steering] is set up when \
                            the node starts; restart stator after adding it"
                        .into(),
                );
            };
            if workers != rss.cpus().len() {
                return Err(format!(
                    "{workers} workers for {} CPUs of receive steering: one worker per CPU",
                    rss.cpus().len()
                ));
            }
            let transport = match spec.protocol {
                stator_proxy::Protocol::Udp => stator_steer::Transport::Udp,
                _ => stator_steer::Transport::Tcp,
            };
            rss.steer_port(transport, spec.address.port())
                .map_err(|e| e.to_string())?;
            rss.listener_options()
        } else {
            stator_steer::SteeringOptions {
                key: lock(&self.keys).get(&spec.name).copied(),
                ..stator_steer::SteeringOptions::new(workers.max(STEERING_CAPACITY) as u32)
            }
        };
        let loaded = stator_steer::ReuseportSteering::load(&options).map_err(|e| e.to_string())?;
        Ok(Box::new(Group(loaded)))
    }
}

#[derive(Debug)]
struct Group(stator_steer::ReuseportSteering);

impl SteeringGroup for Group {
    fn set_socket(&mut self, worker: usize, fd: BorrowedFd<'_>) -> Result<(), String> {
        self.0
            .set_socket(worker as u32, fd)
            .map_err(|e| e.to_string())
    }

    fn attach(&mut self, fd: BorrowedFd<'_>) -> Result<(), String> {
        self.0.attach(fd).map_err(|e| e.to_string())
    }

    fn set_workers(&mut self, live: &[u32]) -> Result<(), String> {
        self.0
            .set_workers(live)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn clear_socket(&mut self, worker: usize) -> Result<(), String> {
        self.0
            .clear_socket(worker as u32)
            .map_err(|e| e.to_string())
    }

    fn key(&self) -> Option<Vec<u8>> {
        Some(self.0.key().bytes().to_vec())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.0
            .counters()
            .map(|c| c.iter().map(|(k, v)| (k.label(), v)).collect())
            .unwrap_or_default()
    }
}

fn set_states(proxy: &Proxy, view: &View) {
    let now = Instant::now();
    for l in &view.config.listeners {
        let states: Vec<UpstreamState> = l
            .upstreams
            .iter()
            .map(|u| match view.backends.get(u.backend.0) {
                Some(b) if b.health == Health::Up => match b.drain {
                    DrainView::None => UpstreamState::Usable,
                    DrainView::Draining { until } if until > now => UpstreamState::Draining,
                    _ => UpstreamState::Absent,
                },
                _ => UpstreamState::Absent,
            })
            .collect();
        let _ = proxy.set_states(&l.name, &states);
    }
}

/// Worker threads when a listener does not say: one per core.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The listeners of a configuration, as the proxy runs them.
pub fn specs(config: &Config) -> Vec<ListenerSpec> {
    let cpus: Option<Vec<usize>> = config
        .receive_steering
        .as_ref()
        .map(|r| receive_cpus(r).into_iter().map(|c| c as usize).collect());
    config
        .listeners
        .iter()
        .map(|l| {
            let worker_cpus = cpus
                .clone()
                .filter(|_| l.steering == stator_config::types::Steering::Cpu);
            (l, worker_cpus)
        })
        .map(|(l, worker_cpus)| ListenerSpec {
            name: l.name.clone(),
            address: l.address,
            protocol: l.protocol,
            pool: config.pool(l.pool).name.clone(),
            upstreams: l
                .upstreams
                .iter()
                .map(|u| {
                    let b = config.backend(u.backend);
                    UpstreamSpec {
                        name: b.name.clone(),
                        addr: std::net::SocketAddr::new(b.address, u.port),
                        weight: u.weight,
                    }
                })
                .collect(),
            algorithm: l.scheduler,
            workers: l.workers.map_or_else(
                || worker_cpus.as_ref().map_or_else(default_workers, Vec::len),
                usize::from,
            ),
            pin_workers: l.pin_workers,
            worker_cpus: worker_cpus.clone(),
            steering: l.steering,
            persistence: l.persistence.map(|p| PersistenceSpec {
                timeout: p.timeout,
                max_entries: p.max_entries as usize,
            }),
            retries: usize::from(l.retries),
            passive: stator_proxy::PassiveSpec {
                max_fails: l.max_fails,
                fail_timeout: l.fail_timeout,
            },
            max_connections: l.max_connections as usize,
            max_connections_per_source: l.max_connections_per_source,
            source_prefixes: SourcePrefixes {
                v4: l.source_prefix_v4,
                v6: l.source_prefix_v6,
            },
            timeouts: l.timeouts,
            http: HttpSpec {
                forwarded_for: l.http.forwarded_for,
                forwarded: l.http.forwarded,
                trusted_proxies: l.http.trusted_proxies.clone(),
                max_header_size: l.http.max_header_size as usize,
                keepalive_pool: l.http.keepalive_pool as usize,
                keepalive_timeout: l.http.keepalive_timeout,
                served_by: l.http.served_by,
                // validated by stator-config against the same names (a test checks the lists)
                retry_methods: stator_proxy::Methods::parse(
                    l.http.retry_methods.iter().map(String::as_str),
                )
                .unwrap_or(stator_proxy::Methods::IDEMPOTENT),
            },
            udp: UdpSpec {
                responses: l.udp.responses,
                max_sessions: l.udp.max_sessions as usize,
                max_sessions_per_source: l.udp.max_sessions_per_source,
                session_rate: l.udp.session_rate,
                session_burst: l.udp.session_burst,
                unreplied_timeout: l.udp.unreplied_timeout,
                proxy_protocol: l.udp.proxy_protocol,
                gro: l.udp.gro,
                gso: l.udp.gso,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// stator-config validates `http.retry_methods` against its list and the proxy parses them
    /// with its own: the two must name the same methods.
    #[test]
    fn the_configs_methods_are_the_proxys() {
        assert_eq!(
            stator_config::defaults::HTTP_METHODS,
            stator_proxy::Methods::NAMES
        );
        let all = stator_proxy::Methods::parse(stator_config::defaults::HTTP_METHODS).unwrap();
        assert_eq!(all.names().count(), stator_proxy::Methods::NAMES.len());
        let default = stator_proxy::Methods::parse(stator_config::defaults::RETRY_METHODS).unwrap();
        assert_eq!(default, stator_proxy::Methods::IDEMPOTENT);
    }
}
