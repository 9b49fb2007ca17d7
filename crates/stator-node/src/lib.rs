//! # stator-node — one node, started and stopped in order: what `stator run` runs
//!
//! Layer: the top of the library crates, below only the binary. It wires together the
//! controller (`stator-control`: reconciler, data-plane adapters, proxy tier, supervision),
//! the health checks (`stator-health`) and the admin API (`stator-api`), none of which knows
//! the others' tasks.
//!
//! [`Node::start`]:
//! 1. validates the configuration and checks the host ([`stator_control::host::preflight`]: root,
//!    interfaces, forwarding sysctls) — each failure is one clear error;
//! 2. binds the admin API's Unix socket ([`stator_api::socket`]) and, with `api.listen`, its
//!    TCP endpoint (another node's socket or a port in use fails here, before anything
//!    changes);
//! 3. loads the data plane (reusing pinned maps: connection table, counters, the active
//!    snapshot) and attaches it to the configured interfaces — an interface that already
//!    carries our program keeps forwarding, the new program is swapped in;
//! 4. starts the health checks and waits (a few seconds at most) for their first results;
//! 5. commits the first snapshot, with ids seeded from the one that was active, then starts
//!    the BGP announcer (BIRD unreachable is retried in the background, never fatal) and the
//!    forwarder watchdog;
//! 6. sizes the proxy tier's descriptor budget ([`stator_control::descriptors`]: the limit, raised to
//!    the hard one before step 1, less what is open now and what the configuration reserves
//!    for health checks, the API and BIRD — a reserve that leaves too little refuses the
//!    start) and starts the listeners.
//!
//! [`Node::run_until_signal`] tells systemd the node is ready and pings its watchdog while the
//! main loop and every one of [`Node::vitals`] make progress ([`stator_control::supervise`]).
//!
//! [`Node::shutdown`]: withdraw every VIP (BIRD confirms, bounded), stop the checks, detach
//! or keep the data plane (`dataplane.on_exit`), stop the API.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod planes;
pub mod upgrade;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use stator_api::{self as api, Ctx};
use stator_config::DataplaneMode;
use stator_control::ControlError;
use stator_control::events::EventLog;
use stator_control::host;
use stator_control::listeners::ProxyTier;
use stator_control::reconciler::{
    ApplyReport, Inputs, Parts, Reconciler, Request, SharedPlane, with_plane,
};
use stator_control::reports::Reporter;
use stator_control::supervise::{self, Heartbeat, Supervision, Vital};
use stator_control::view::View;
use stator_control::watchdog;
use stator_health::ProbeRoutes;
use stator_plane::DataPlane;
use stator_plane::noplane::NoPlane;

/// How a node is started.
#[derive(Debug, Default)]
pub struct NodeOptions {
    /// The configuration file (for SIGHUP reloads and messages); `None` for text from
    /// elsewhere.
    pub config_path: Option<PathBuf>,
    /// A data plane to use instead of loading the XDP forwarder from `[dataplane]`.
    pub plane: Option<Box<dyn DataPlane>>,
    /// Skip attaching to `dataplane.interfaces` (tests of the controller alone).
    pub no_attach: bool,
    /// Skip the host checks, at start and on reloads (tests that bring their own data
    /// plane).
    pub no_preflight: bool,
    /// Listen here instead of `api.listen` (tests: port 0); a token is needed all the same.
    pub listen: Option<SocketAddr>,
    /// The API's Unix socket here instead of at `api.socket` (tests: a private directory).
    pub socket: Option<PathBuf>,
    /// Where health probes connect instead of the backends' addresses (tests without root,
    /// which cannot own those addresses; empty otherwise).
    pub probe_routes: ProbeRoutes,
    /// The commit the binary was built from (`/v1/status`, `stator_build_info`); `unknown`
    /// when `None`.
    pub commit: Option<String>,
    /// The sockets of the node this one replaces (`stator run --takeover`, [`upgrade`]): used
    /// instead of binding where they match the configuration. A start that fails then
    /// leaves the data plane attached (the replaced node resumes with it).
    pub inherited: Option<upgrade::Inherited>,
}

/// A running node.
#[derive(Debug)]
pub struct Node {
    ctx: Ctx,
    api_addr: Option<SocketAddr>,
    api_socket: api::socket::SocketFile,
    config_path: Option<PathBuf>,
    reconciler: JoinHandle<()>,
    watchdog: JoinHandle<()>,
    servers: Vec<(JoinHandle<()>, oneshot::Sender<()>)>,
    startup: ApplyReport,
    follower: JoinHandle<()>,
    /// The tracer's reports (XDP and AF_XDP planes).
    reporter: Option<Reporter>,
    /// The reconciler's heartbeat.
    heartbeat: Heartbeat,
    /// The upgrade socket ([`upgrade`]).
    upgrade: upgrade::UpgradeSocket,
    /// Copies of the admin API's listening sockets, for a successor.
    api_copies: Arc<Vec<(upgrade::Entry, OwnedFd)>>,
    /// The binary this process was started from, as a path (after a package upgrade, the
    /// new binary is there): what [`upgrade::Message::Spawn`] starts.
    exe: Option<PathBuf>,
}

/// How an upgrade session ended ([`Node::run_until_signal`]).
#[derive(Debug)]
enum SessionEnd {
    /// The successor serves: hand over.
    HandedOver(u32),
    /// It did not: running on.
    RanOn(String),
    /// A client asked for a successor to be started.
    Spawn(upgrade::Link),
    /// Nothing happened (a peer that said nothing useful).
    Nothing,
}

impl Node {
    /// Starts a node with configuration `text` (from `source`, a path or a name for
    /// messages). Returns once the first snapshot is committed and the API answers.
    ///
    /// # Errors
    /// An invalid configuration, a host that is not ready, an API address in use, a data
    /// plane that cannot load, attach or commit. Nothing is left running on error.
    pub async fn start(
        text: String,
        source: String,
        opts: NodeOptions,
    ) -> Result<Self, ControlError> {
        let config =
            Arc::new(stator_config::from_toml_str(&source, &text).map_err(ControlError::Config)?);
        // First, before anything opens a descriptor: the limit the budget is sized from.
        let nofile = stator_control::descriptors::raise_limit();
        if !opts.no_preflight {
            host::preflight(&config)?;
        }
        if let Some(path) = &opts.config_path {
            host::config_file_secrets(path, &config)?;
        }
        let tokens = host::resolve_tokens(&config)?;
        let trace_keys = host::trace_keys(&config)?;
        let tls: Arc<dyn stator_health::Tls> = Arc::new(stator_tls::Rustls);
        host::tls_files(&*tls, &config)?;
        let socket_path = opts
            .socket
            .clone()
            .unwrap_or_else(|| config.api.socket.clone());
        let successor = opts.inherited.is_some();
        let mut inherited = opts.inherited.unwrap_or_default();
        let unix = match inherited.api_unix.take() {
            Some((path, fd)) if path == socket_path => {
                api::socket::adopt(fd, &socket_path, &config.api.socket_group)?
            }
            _ => api::socket::bind(&socket_path, &config.api.socket_group)?,
        };
        let upgrade_path = opts.socket.as_deref().map_or_else(
            || config.upgrade.socket.clone(),
            stator_config::upgrade_socket_beside,
        );
        let upgrade_socket = match inherited.upgrade.take() {
            Some((path, fd)) if path == upgrade_path => upgrade::UpgradeSocket::adopt(fd, &path),
            _ => upgrade::UpgradeSocket::bind(&upgrade_path),
        }
        .map_err(|reason| ControlError::Host {
            field: "upgrade.socket".into(),
            reason,
        })?;
        let tcp = match opts.listen.or(config.api.listen) {
            None => None,
            Some(_) if !tokens.any() => {
                return Err(ControlError::Host {
                    field: "api.listen".into(),
                    reason: "a TCP endpoint needs a token (api.token_file or \
                             api.read_token_file), loopback included"
                        .into(),
                });
            }
            Some(listen) => Some(match inherited.api_tcp.take() {
                Some((address, fd))
                    if address == listen || (listen.port() == 0 && address.ip() == listen.ip()) =>
                {
                    let l = std::net::TcpListener::from(fd);
                    l.set_nonblocking(true)
                        .and_then(|()| tokio::net::TcpListener::from_std(l))
                        .map_err(|e| {
                            ControlError::io("taking over the admin API's TCP endpoint", e)
                        })?
                }
                _ => tokio::net::TcpListener::bind(listen).await.map_err(|e| {
                    ControlError::io(format!("binding the admin API to {listen} (api.listen)"), e)
                })?,
            }),
        };
        let api_addr = match &tcp {
            Some(l) => Some(
                l.local_addr()
                    .map_err(|e| ControlError::io("reading the admin API's address", e))?,
            ),
            None => None,
        };

        let xdp =
            opts.plane.is_none() && config.dataplane.mode == stator_config::DataplaneMode::Xdp;
        let plane: Box<dyn DataPlane> = match opts.plane {
            Some(p) => p,
            None if config.dataplane.mode == stator_config::DataplaneMode::None => {
                Box::new(NoPlane::default())
            }
            None => {
                let config = Arc::clone(&config);
                tokio::task::spawn_blocking(move || planes::load(&config))
                    .await
                    .map_err(|e| {
                        ControlError::io(
                            "loading the data plane",
                            std::io::Error::other(e.to_string()),
                        )
                    })??
            }
        };
        let plane: SharedPlane = Arc::new(Mutex::new(plane));
        let interfaces = if opts.no_attach {
            Vec::new()
        } else {
            config.dataplane.interfaces.clone()
        };
        let to_attach = interfaces.clone();
        let attached = with_plane(&plane, move |p| p.attach(&to_attach)).await??;
        for a in &attached {
            for w in &a.warnings {
                tracing::warn!(iface = %a.iface, "{w}");
            }
            tracing::info!(iface = %a.iface, mode = %a.mode, prog_id = a.prog_id, replaced = a.replaced,
                           "forwarder attached");
        }
        let (active, reader) = with_plane(&plane, |p| {
            Ok::<_, ControlError>((p.active_snapshot()?, p.reader()?))
        })
        .await??;
        if let Some(a) = active.as_ref().filter(|a| a.generation > 0) {
            tracing::info!(
                generation = a.generation,
                vips = a.vips.len(),
                reals = a.reals.len(),
                "data plane has an active snapshot: keeping its ids"
            );
        }

        let stopping = Arc::new(AtomicBool::new(false));
        let announcer = Arc::new(Mutex::new(None));
        let tokens = Arc::new(RwLock::new(tokens));
        let (req_tx, req_rx) = mpsc::channel(64);
        let (trans_tx, trans_rx) = mpsc::unbounded_channel();
        let (fwd_tx, fwd_rx) = mpsc::unbounded_channel();
        let events = EventLog::new();
        let proxy = ProxyTier::new(&config.node.name);
        let mut reconciler = Reconciler::new(
            Parts {
                plane: Arc::clone(&plane),
                reader: Arc::clone(&reader),
                config: Arc::clone(&config),
                text,
                source,
                active,
                interfaces: interfaces.clone(),
                announcer: Arc::clone(&announcer),
                tokens: Arc::clone(&tokens),
                trace_keys,
                stopping: Arc::clone(&stopping),
                probe_routes: opts.probe_routes,
                tls: Arc::clone(&tls),
                events: events.clone(),
                host_checks: !opts.no_preflight,
                listeners: proxy.clone(),
            },
            trans_tx,
        );
        let ctx = Ctx {
            proxy: proxy.clone(),
            requests: req_tx,
            view: reconciler.subscribe(),
            reader,
            board: reconciler.runner().board(),
            announcer,
            tokens,
            scan: Arc::new(Mutex::new(())),
            host_checks: !opts.no_preflight,
            tls,
            conn_stats: Arc::default(),
            events,
            commit: Arc::from(opts.commit.as_deref().unwrap_or("unknown")),
            tracer: Arc::default(),
        };
        let reporter = if xdp {
            let ring = stator_xdp::TraceRing::open(&config.dataplane.pin_path)
                .map_err(|e| ControlError::data_plane("opening stator_trace", e))?;
            Some(Reporter::start(
                Box::new(ring),
                ctx.view.clone(),
                Arc::clone(&ctx.tracer),
            )?)
        } else {
            // the AF_XDP plane's packet threads report in process
            match with_plane(&plane, |p| Ok::<_, ControlError>(p.trace_source())).await?? {
                Some(src) => Some(Reporter::start(
                    src,
                    ctx.view.clone(),
                    Arc::clone(&ctx.tracer),
                )?),
                None => None,
            }
        };
        let watchdog = watchdog::spawn(Arc::clone(&plane), interfaces, stopping, fwd_tx);
        let app = api::router(ctx.clone());
        let api::socket::ApiSocket {
            listener: unix_listener,
            policy,
            file: api_socket,
        } = unix;
        let copy = |fd: std::os::fd::BorrowedFd<'_>| {
            fd.try_clone_to_owned()
                .map_err(|e| ControlError::io("copying the admin API's socket", e))
        };
        let mut api_copies = vec![(
            upgrade::Entry::ApiUnix {
                path: api_socket.path().to_owned(),
            },
            copy(unix_listener.as_fd())?,
        )];
        if let (Some(l), Some(address)) = (&tcp, api_addr) {
            api_copies.push((upgrade::Entry::ApiTcp { address }, copy(l.as_fd())?));
        }
        let mut endpoints = vec![api::serve::Endpoint::Unix(unix_listener, policy)];
        endpoints.extend(tcp.map(api::serve::Endpoint::Tcp));
        let servers: Vec<_> = endpoints
            .into_iter()
            .map(|endpoint| {
                let (stop, stop_rx) = oneshot::channel::<()>();
                let task = tokio::spawn(api::serve::serve(
                    endpoint,
                    app.clone(),
                    ctx.clone(),
                    stop_rx,
                ));
                (task, stop)
            })
            .collect();
        tracing::info!(socket = %api_socket.path().display(), listen = ?api_addr, "admin API listening");
        let stop_servers = |servers: Vec<(JoinHandle<()>, oneshot::Sender<()>)>| async move {
            for (task, stop) in servers {
                let _ = stop.send(());
                let _ = task.await;
            }
        };
        let mut inputs = Inputs {
            requests: req_rx,
            transitions: trans_rx,
            forwarder: fwd_rx,
        };
        let startup = match reconciler.start(&mut inputs).await {
            Ok(r) => r,
            Err(e) => {
                watchdog.abort();
                stop_servers(servers).await;
                if !opts.no_attach && !successor {
                    let _ = with_plane(&plane, |p| p.detach(false)).await;
                }
                return Err(e);
            }
        };
        // The listeners start once the first snapshot (and so the first health states) is in:
        // a port that cannot be bound fails the start like any other.
        // Their descriptor budget first: the limit less what the node holds now and what the
        // configuration reserves (health checks, the API, BIRD, the listeners' own sockets).
        let view = reconciler.subscribe();
        let first = Arc::clone(&view.borrow());
        let open = stator_sys::limits::open_fds().map_or(0, |n| n as u64);
        let started = proxy
            .descriptors
            .start(
                &first.config,
                stator_control::listeners::default_workers(),
                nofile,
                open,
            )
            .and_then(|()| proxy.start_access_log(&first.config))
            .and_then(|()| {
                // a client reaches the same worker index as in the process this one replaces
                proxy.inherit_keys(std::mem::take(&mut inherited.steering_keys));
                proxy.start_receive_steering(&first.config)
            })
            .and_then(|()| {
                proxy
                    .lock()
                    .inherit(std::mem::take(&mut inherited.listeners));
                let applied = proxy.apply(&first);
                for (listener, address) in proxy.lock().close_inherited() {
                    tracing::warn!(%listener, %address,
                                   "a socket handed over that no listener takes now: closed");
                }
                applied.map_err(|e| stator_control::listeners::listener_error(&first.config, &e))
            });
        if let Err(e) = started {
            proxy.shutdown(std::time::Duration::ZERO);
            watchdog.abort();
            stop_servers(servers).await;
            if !opts.no_attach && !successor {
                let _ = with_plane(&plane, |p| p.detach(false)).await;
            }
            return Err(e);
        }
        // started: the sockets handed over are this node's to remove when it stops
        let mut api_socket = api_socket;
        api_socket.own();
        let mut upgrade_socket = upgrade_socket;
        upgrade_socket.own();
        let follower = proxy.follow(view);
        let heartbeat = reconciler.heartbeat();
        let reconciler = tokio::spawn(reconciler.run(inputs));
        Ok(Self {
            follower,
            ctx,
            api_addr,
            api_socket,
            config_path: opts.config_path,
            reconciler,
            watchdog,
            servers,
            startup,
            reporter,
            heartbeat,
            upgrade: upgrade_socket,
            api_copies: Arc::new(api_copies),
            exe: std::env::current_exe().ok(),
        })
    }

    /// The upgrade socket's path.
    pub fn upgrade_socket(&self) -> &std::path::Path {
        self.upgrade.path()
    }

    /// The tasks the node cannot live without, each with the deadline by which it must act
    /// again: the reconciler, the health checks, the BGP announcer (`main`, the loop of
    /// [`Node::run_until_signal`], is added there). systemd's watchdog is pinged only while
    /// every one keeps its promise ([`stator_control::supervise`]).
    pub fn vitals(&self) -> Vec<Vital> {
        let board = self.ctx.board.clone();
        let announcer = Arc::clone(&self.ctx.announcer);
        vec![
            Vital::looping(
                "reconciler",
                self.heartbeat.clone(),
                supervise::LOOP_ALLOWANCE,
            ),
            Vital::new("health checks", move || board.deadline()),
            Vital::new("bgp announcer", move || {
                announcer
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_ref()
                    .map(|t| t.last_beat() + supervise::ANNOUNCER_ALLOWANCE)
            }),
        ]
    }

    /// Where the admin API's TCP endpoint listens, if it has one.
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api_addr
    }

    /// The admin API's Unix socket.
    pub fn api_socket(&self) -> &std::path::Path {
        self.api_socket.path()
    }

    /// What the first commit did.
    pub fn startup(&self) -> &ApplyReport {
        &self.startup
    }

    /// The latest view.
    pub fn view(&self) -> Arc<View> {
        self.ctx.view()
    }

    /// What the API handlers use (tests reach the node's state through it).
    pub fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// Applies configuration text, trusted as the configuration file is (`PUT /v1/config`
    /// also refuses new file settings).
    pub async fn apply(
        &self,
        text: String,
        source: String,
        if_match: Option<u64>,
    ) -> Result<ApplyReport, ControlError> {
        let (reply, rx) = oneshot::channel();
        self.ctx
            .requests
            .send(Request::Apply {
                text,
                source,
                origin: stator_control::reconciler::Origin::File,
                if_match,
                reply,
            })
            .await
            .map_err(|_| ControlError::ShuttingDown)?;
        rx.await.map_err(|_| ControlError::ShuttingDown)?
    }

    /// Drains a backend (by stable name) for `timeout` (`api.drain_timeout` if `None`), as
    /// `POST /v1/backends/{id}/drain` does.
    pub async fn drain(
        &self,
        backend: String,
        timeout: Option<std::time::Duration>,
    ) -> Result<(), ControlError> {
        let (reply, rx) = oneshot::channel();
        self.ctx
            .requests
            .send(Request::Drain {
                backend,
                timeout,
                reply,
            })
            .await
            .map_err(|_| ControlError::ShuttingDown)?;
        rx.await.map_err(|_| ControlError::ShuttingDown)?
    }

    /// Ends a drain, as `POST /v1/backends/{id}/undrain` does.
    pub async fn undrain(&self, backend: String) -> Result<(), ControlError> {
        let (reply, rx) = oneshot::channel();
        self.ctx
            .requests
            .send(Request::Undrain { backend, reply })
            .await
            .map_err(|_| ControlError::ShuttingDown)?;
        rx.await.map_err(|_| ControlError::ShuttingDown)?
    }

    /// Reads the configuration file again and applies it (SIGHUP).
    pub async fn reload_file(&self) -> Result<ApplyReport, ControlError> {
        let Some(path) = &self.config_path else {
            return Err(ControlError::bad_request(
                "the node was not started from a file",
                None,
            ));
        };
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|source| ControlError::File {
                path: path.clone(),
                source,
            })?;
        self.apply(text, path.display().to_string(), None).await
    }

    /// Withdraws every VIP, stops the checks, detaches or keeps the data plane per
    /// `dataplane.on_exit`, and stops the API. The error is the withdrawal's, if BIRD did
    /// not confirm it in time (the rest happens anyway).
    pub async fn shutdown(self) -> Result<(), ControlError> {
        let (reply, rx) = oneshot::channel();
        let result = if self
            .ctx
            .requests
            .send(Request::Shutdown { reply })
            .await
            .is_ok()
        {
            rx.await.unwrap_or(Ok(()))
        } else {
            Ok(())
        };
        let _ = self.reconciler.await;
        self.follower.abort();
        let proxy = self.ctx.proxy.clone();
        let _ = tokio::task::spawn_blocking(move || {
            proxy.shutdown(std::time::Duration::from_secs(5));
        })
        .await;
        self.watchdog.abort();
        for (task, stop) in self.servers {
            let _ = stop.send(());
            let _ = task.await;
        }
        drop(self.api_socket);
        drop(self.reporter);
        result
    }

    /// Runs until SIGTERM or SIGINT (then [`Node::shutdown`]); SIGHUP reloads the file,
    /// SIGUSR1 reopens the access log (after logrotate moved it).
    /// Tells `supervision` (systemd) that the node is ready, pings its watchdog while this
    /// loop and every one of [`Node::vitals`] make progress, and that it is stopping.
    pub async fn run_until_signal(
        mut self,
        mut supervision: Supervision,
    ) -> Result<(), ControlError> {
        use tokio::signal::unix::{SignalKind, signal};
        let sig =
            |kind| signal(kind).map_err(|e| ControlError::io("installing a signal handler", e));
        let mut term = sig(SignalKind::terminate())?;
        let mut int = sig(SignalKind::interrupt())?;
        let mut hup = sig(SignalKind::hangup())?;
        let mut usr1 = sig(SignalKind::user_defined1())?;
        let main = Heartbeat::new();
        let mut vitals = vec![Vital::looping(
            "main loop",
            main.clone(),
            supervise::LOOP_ALLOWANCE,
        )];
        vitals.extend(self.vitals());
        let view = self.view();
        supervision.ready(
            &format!(
                "running: snapshot generation {}, {} VIPs announced of {}",
                view.generation,
                view.announce.iter().filter(|a| **a).count(),
                view.announce.len()
            ),
            vitals,
        );
        let refresher = self.start_beat(&main);
        let mut beat = tokio::time::interval(supervise::BEAT_INTERVAL);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (links_tx, mut links) = mpsc::channel(4);
        if let Err(e) = self.upgrade.start(links_tx) {
            tracing::error!(error = %e, "cannot serve the upgrade socket: upgrades refused");
        }
        let (exits_tx, mut exits) = mpsc::unbounded_channel();
        let mut session: Option<JoinHandle<SessionEnd>> = None;
        // `stator upgrade` clients waiting for the successor they asked for, with its pid
        let mut waiters: Vec<(upgrade::Link, u32)> = Vec::new();
        let mut handed_over = None;
        loop {
            main.beat();
            tokio::select! {
                _ = beat.tick() => {}
                Some(link) = links.recv() => {
                    if session.is_some() {
                        answer(vec![link], upgrade::Message::Refused {
                            reason: "another upgrade is in progress".into(),
                        });
                    } else {
                        session = Some(tokio::spawn(upgrade_session(link, self.session_parts())));
                    }
                }
                end = async { session.as_mut().expect("guarded").await }, if session.is_some() => {
                    session = None;
                    let end = end.unwrap_or_else(|e| SessionEnd::RanOn(format!("the upgrade task failed: {e}")));
                    match end {
                        SessionEnd::HandedOver(pid) => {
                            let links = waiters.drain(..).map(|(l, _)| l).collect();
                            answer(links, upgrade::Message::Serving { pid });
                            handed_over = Some(pid);
                            break;
                        }
                        SessionEnd::RanOn(reason) => {
                            let links = waiters.drain(..).map(|(l, _)| l).collect();
                            answer(links, upgrade::Message::Failed { reason });
                        }
                        SessionEnd::Spawn(link) => match self.spawn_successor(exits_tx.clone()) {
                            Ok(pid) => waiters.push((link, pid)),
                            Err(reason) => answer(vec![link], upgrade::Message::Failed { reason }),
                        },
                        SessionEnd::Nothing => {}
                    }
                }
                Some((pid, status)) = exits.recv() => {
                    let (gone, keep): (Vec<_>, Vec<_>) = waiters.drain(..).partition(|(_, p)| *p == pid);
                    waiters = keep;
                    if session.is_none() {
                        let links = gone.into_iter().map(|(l, _)| l).collect();
                        answer(links, upgrade::Message::Failed {
                            reason: format!("the successor (pid {pid}) exited ({status}) before it served; its log says why"),
                        });
                    } else {
                        waiters.extend(gone);
                    }
                }
                _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
                _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break; }
                _ = usr1.recv() => {
                    match self.ctx.proxy.reopen_access_log() {
                        Ok(()) => tracing::info!("SIGUSR1: access log reopened"),
                        Err(e) => tracing::error!(error = %e, "SIGUSR1: cannot reopen the access log; it goes on to the file it had"),
                    }
                }
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: reloading the configuration file");
                    match self.reload_file().await {
                        Ok(r) => tracing::info!(config_generation = r.config_generation, took_seconds = r.reload_seconds, "reload applied"),
                        Err(e) => tracing::error!(error = %e, "reload refused; the running configuration stays"),
                    }
                }
            }
        }
        if let Some(pid) = handed_over {
            return self.hand_over(supervision, refresher, pid).await;
        }
        supervision.stopping();
        let keep = self.view().config.dataplane.on_exit == stator_config::OnExit::Keep;
        // With on_exit = "keep" the forwarder is meant to outlive this process: its heartbeat
        // check goes off before the shutdown starts. The shutdown itself stops the main loop's
        // beat and can take longer than the bound (a withdrawal waits up to 5 s for BIRD;
        // stale_after may be 3 s), and the forwarder would pass traffic as stale meanwhile.
        let refresher = match refresher {
            Some(r) if keep => {
                r.finish(true);
                None
            }
            other => other,
        };
        let result = self.shutdown().await;
        if let Some(r) = refresher {
            r.finish(false);
        }
        result
    }

    /// What an upgrade session needs of the node.
    fn session_parts(&self) -> SessionParts {
        let config = self.view().config.clone();
        SessionParts {
            requests: self.ctx.requests.clone(),
            proxy: self.ctx.proxy.clone(),
            api_copies: Arc::clone(&self.api_copies),
            upgrade: self
                .upgrade
                .fd()
                .try_clone_to_owned()
                .map(|fd| (self.upgrade.path().to_owned(), fd))
                .ok(),
            start_timeout: config.upgrade.start_timeout,
            commit: Arc::clone(&self.ctx.commit),
        }
    }

    /// Starts the successor a `stator upgrade` asked for: this process's binary (by the path
    /// it was started from) with the same configuration file and `--takeover`. Its exit is
    /// sent to `exits` (a successor that serves outlives this process).
    fn spawn_successor(&self, exits: mpsc::UnboundedSender<(u32, String)>) -> Result<u32, String> {
        let exe = self
            .exe
            .as_ref()
            .ok_or("the node's binary path is unknown")?;
        let config = self
            .config_path
            .as_ref()
            .ok_or("the node was not started from a configuration file")?;
        let mut child = std::process::Command::new(exe)
            .arg("run")
            .arg("-c")
            .arg(config)
            .arg("--takeover")
            .stdin(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let pid = child.id();
        tracing::info!(pid, binary = %exe.display(), "upgrade: successor started");
        std::thread::Builder::new()
            .name("stator-successor".into())
            .spawn(move || {
                let status = child
                    .wait()
                    .map_or_else(|e| e.to_string(), |s| s.to_string());
                let _ = exits.send((pid, status));
            })
            .map_err(|e| format!("cannot watch the successor: {e}"))?;
        Ok(pid)
    }

    /// The successor serves: hand everything over without withdrawing or detaching, stop
    /// accepting, serve what is open for up to `upgrade.drain`, stop.
    async fn hand_over(
        mut self,
        mut supervision: Supervision,
        refresher: Option<supervise::BeatRefresher>,
        successor: u32,
    ) -> Result<(), ControlError> {
        let drain = self.view().config.upgrade.drain;
        tracing::info!(successor, drain = ?drain, "upgrade: the successor serves; handing over and draining");
        // systemd follows the successor (MAINPID): nothing more from this process
        supervision.handed_over();
        // First stop accepting — upgrades, API requests, proxy connections — so that every
        // new client meets the successor; then stop the controller; then drain.
        self.upgrade.keep();
        self.upgrade.stop();
        self.api_socket.keep();
        for (task, stop) in self.servers.drain(..) {
            let _ = stop.send(());
            let _ = task.await;
        }
        let proxy = self.ctx.proxy.clone();
        let drained = tokio::task::spawn_blocking(move || proxy.shutdown(drain));
        let (reply, rx) = oneshot::channel();
        if self
            .ctx
            .requests
            .send(Request::HandOver { reply })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
        let _ = (&mut self.reconciler).await;
        self.follower.abort();
        self.watchdog.abort();
        // the successor refreshes the data plane's heartbeat now
        if let Some(r) = refresher {
            r.finish(false);
        }
        drop(self.reporter.take());
        let _ = drained.await;
        tracing::info!("upgrade: drained; exiting");
        Ok(())
    }

    /// Starts refreshing the data plane's heartbeat when `dataplane.stale_after` asks for it
    /// (XDP only), fed by the main loop's beat and every one of [`Node::vitals`]. A node whose
    /// heartbeat cannot be written runs without it and says so.
    fn start_beat(&self, main: &Heartbeat) -> Option<supervise::BeatRefresher> {
        let config = self.view().config.clone();
        let stale_after = config.dataplane.stale_after?;
        if config.dataplane.mode != DataplaneMode::Xdp {
            return None;
        }
        let writer = match stator_xdp::BeatWriter::open(&config.dataplane.pin_path) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "cannot write the data-plane heartbeat: dataplane.stale_after has no effect");
                return None;
            }
        };
        let mut vitals = vec![Vital::looping(
            "main loop",
            main.clone(),
            supervise::LOOP_ALLOWANCE,
        )];
        vitals.extend(self.vitals());
        match supervise::BeatRefresher::start(Arc::new(writer), stale_after, vitals) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the data-plane heartbeat: dataplane.stale_after has no effect");
                None
            }
        }
    }
}

/// What an upgrade session needs of the node ([`Node::session_parts`]).
struct SessionParts {
    requests: mpsc::Sender<Request>,
    proxy: ProxyTier,
    api_copies: Arc<Vec<(upgrade::Entry, OwnedFd)>>,
    upgrade: Option<(PathBuf, OwnedFd)>,
    start_timeout: std::time::Duration,
    commit: Arc<str>,
}

/// Runs `f` (blocking socket I/O) off the runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Sends `message` to each of `links` (off the runtime's threads) and closes them.
fn answer(links: Vec<upgrade::Link>, message: upgrade::Message) {
    if links.is_empty() {
        return;
    }
    tokio::task::spawn_blocking(move || {
        for l in links {
            let _ = l.send(&message, &[]);
        }
    });
}

/// One connection to the upgrade socket (the protocol in [`upgrade`]).
async fn upgrade_session(link: upgrade::Link, parts: SessionParts) -> SessionEnd {
    let Some((first, link)) = blocking(move || (link.recv(upgrade::STEP_TIMEOUT), link)).await
    else {
        return SessionEnd::Nothing;
    };
    let (successor, their_commit) = match first {
        Ok((upgrade::Message::Hello { pid, commit }, _)) => (pid, commit),
        Ok((upgrade::Message::Spawn, _)) => return SessionEnd::Spawn(link),
        Ok((other, _)) => {
            tracing::warn!(message = ?other, "upgrade socket: unexpected first message");
            return SessionEnd::Nothing;
        }
        Err(e) => {
            tracing::warn!(error = %e, "upgrade socket: no hello");
            return SessionEnd::Nothing;
        }
    };
    let (reply, rx) = oneshot::channel();
    let paused = match parts.requests.send(Request::Pause { reply }).await {
        Ok(()) => rx.await.unwrap_or(Err(ControlError::ShuttingDown)),
        Err(_) => Err(ControlError::ShuttingDown),
    };
    if let Err(e) = paused {
        answer(
            vec![link],
            upgrade::Message::Refused {
                reason: e.to_string(),
            },
        );
        return SessionEnd::Nothing;
    }
    tracing::info!(successor, commit = %their_commit, "upgrade: a successor takes this node's sockets");
    // the successor steers with its own programs: a socket is in one group map at most, and an
    // interface has one XDP program
    parts.proxy.release_steering();
    let mut sockets: Vec<(upgrade::Entry, OwnedFd)> = Vec::new();
    for h in parts.proxy.lock().handover() {
        match h.fd.try_clone_to_owned() {
            Ok(fd) => sockets.push((
                upgrade::Entry::Listener {
                    listener: h.listener.to_owned(),
                    address: h.address,
                    udp: h.udp,
                },
                fd,
            )),
            Err(e) => {
                tracing::warn!(listener = h.listener, error = %e, "upgrade: a socket not handed over")
            }
        }
    }
    for (entry, fd) in parts.api_copies.iter() {
        if let Ok(fd) = fd.try_clone() {
            sockets.push((entry.clone(), fd));
        }
    }
    if let Some((path, fd)) = parts.upgrade {
        sockets.push((upgrade::Entry::Upgrade { path }, fd));
    }
    let timeout = parts.start_timeout;
    let commit = parts.commit.to_string();
    let keys = parts.proxy.steering_keys();
    let outcome = blocking(move || {
        let borrowed: Vec<_> = sockets
            .iter()
            .map(|(e, fd)| (e.clone(), fd.as_fd()))
            .collect();
        upgrade::send_offer(&link, std::process::id(), &commit, &borrowed, keys)?;
        drop(borrowed);
        drop(sockets);
        link.recv(timeout)
    })
    .await;
    let reason = match outcome {
        Some(Ok((upgrade::Message::Serving { pid }, _))) => return SessionEnd::HandedOver(pid),
        Some(Ok((upgrade::Message::Failed { reason }, _))) => reason,
        Some(Ok((other, _))) => format!("unexpected message {other:?}"),
        Some(Err(e)) => format!("no answer from the successor: {e}"),
        None => "the upgrade task failed".to_owned(),
    };
    tracing::warn!(successor, reason = %reason, "upgrade: the successor did not serve; resuming");
    let proxy = parts.proxy.clone();
    let _ = tokio::task::spawn_blocking(move || proxy.reclaim_steering()).await;
    let (reply, rx) = oneshot::channel();
    if parts.requests.send(Request::Resume { reply }).await.is_ok()
        && let Ok(Err(e)) = rx.await
    {
        tracing::error!(error = %e, "upgrade: resuming: committing again failed (retried on the next change)");
    }
    SessionEnd::RanOn(reason)
}
