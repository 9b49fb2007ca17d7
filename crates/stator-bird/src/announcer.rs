//! The announcer: keeps what BIRD announces equal to the desired VIP routes.
//!
//! Each *pass* observes BIRD and acts on the difference, so it is idempotent and repairs
//! anything that drifted (BIRD restarted, an operator typed `birdc disable`):
//!
//! 1. If only VIP states changed since BIRD last accepted Stator's file, rewrite the file at
//!    once (before talking to BIRD), so that a BIRD that restarts reads the latest intent.
//! 2. If the VIP set or `[bgp]` changed, or this is a new connection to BIRD (it may have
//!    restarted, or Stator has), write the file, `configure check`, then `configure`. A
//!    rejected file is replaced by the previous one (a BIRD restart must still find a
//!    configuration it can load), and the pass carries on with the VIPs BIRD already has, so
//!    withdrawals still happen; the error is reported at the end.
//! 3. `show protocols all`; `enable` each VIP's static protocol that should be announced and
//!    is down, `disable` each that should not be and is up. Protocols in transition (`stop`,
//!    `flush`) are left alone and the pass asks to be run again shortly.
//!
//! Passes run when the desired state changes, every `resync_interval` otherwise, and with
//! exponential backoff while BIRD is unreachable or refuses. Nothing here spawns threads;
//! [`crate::AnnouncerThread`] runs an `Announcer` on one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use stator_config::Bgp;

use crate::client::{BirdClient, Reconfigure};
use crate::error::BirdError;
use crate::file;
use crate::render::render;
use crate::routes::{DesiredRoutes, STATIC_PREFIX, static_protocol_name};
use crate::show::{Protocol, ProtocolState};

/// How often `withdraw_all` looks whether BIRD has finished withdrawing.
const CONFIRM_POLL: Duration = Duration::from_millis(20);

/// Timing of the announcer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnouncerOptions {
    /// Time allowed for each reply from BIRD.
    pub io_timeout: Duration,
    /// Time between passes when nothing changes (repairs drift, notices a restarted BIRD).
    pub resync_interval: Duration,
    /// Time before the next pass while BIRD's protocols are still changing state.
    pub settle_interval: Duration,
    /// First retry delay after a failed pass; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
}

impl Default for AnnouncerOptions {
    fn default() -> Self {
        Self {
            io_timeout: Duration::from_secs(2),
            resync_interval: Duration::from_secs(5),
            settle_interval: Duration::from_millis(50),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// Event counts since the announcer was created (monotonic, for `/metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// VIP routes that became announced.
    pub announcements: u64,
    /// VIP routes that became withdrawn (including VIPs removed from the set while announced).
    pub withdrawals: u64,
    /// Successful `configure` commands.
    pub configures: u64,
    /// Failed passes (BIRD unreachable, a refused command, a rejected configuration).
    pub errors: u64,
    /// Connections opened to BIRD's control socket.
    pub connections: u64,
}

/// One VIP route's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteStatus {
    /// The VIP address (announced as a `/32` or `/128`).
    pub address: IpAddr,
    /// Whether it should be announced (false for every route after `withdraw_all`).
    pub desired: bool,
    /// Whether BIRD offers it to the BGP sessions: its static protocol is enabled and up, as
    /// last seen. This is the per-VIP "announced" gauge.
    pub announced: bool,
    /// When `announced` last changed.
    pub last_change: Option<Instant>,
}

/// One BGP session, as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStatus {
    /// The protocol name (`[[bgp.neighbor]].name`).
    pub name: String,
    /// The neighbour's address.
    pub neighbor: IpAddr,
    /// BIRD's BGP state (`Established`, `Active`, `Connect`, `Idle`, …).
    pub state: String,
    /// True when the session is established.
    pub established: bool,
    /// Routes BIRD currently exports on it.
    pub exported: u64,
}

/// A snapshot of the announcer's state for status pages and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnouncerStatus {
    /// True when the last pass reached BIRD.
    pub bird_reachable: bool,
    /// BIRD's version, from its greeting.
    pub bird_version: Option<String>,
    /// True after `withdraw_all` until `resume`.
    pub withdrawing_all: bool,
    /// Every VIP route, in address order.
    pub routes: Vec<RouteStatus>,
    /// Every BGP session Stator configured.
    pub sessions: Vec<SessionStatus>,
    /// Event counts.
    pub counters: Counters,
    /// The error of the last pass, if it failed.
    pub last_error: Option<String>,
}

impl AnnouncerStatus {
    /// Whether `address` is announced (false when unknown).
    pub fn announced(&self, address: IpAddr) -> bool {
        self.routes
            .iter()
            .any(|r| r.address == address && r.announced)
    }
}

/// The outcome of a successful pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// BIRD matches the desired state.
    Settled,
    /// Some protocol was still changing state; run another pass soon.
    Settling,
}

/// What BIRD's configuration is built from, besides the VIP states.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Structure {
    bgp: Bgp,
    addresses: BTreeSet<IpAddr>,
}

#[derive(Debug, Clone)]
struct RouteState {
    announced: bool,
    last_change: Option<Instant>,
}

/// Exponential backoff (pure: the caller supplies the clock).
#[derive(Debug, Clone)]
struct Backoff {
    initial: Duration,
    max: Duration,
    current: Option<Duration>,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let d = match self.current {
            None => self.initial,
            Some(c) => (c * 2).min(self.max),
        };
        self.current = Some(d);
        d
    }

    fn reset(&mut self) {
        self.current = None;
    }
}

/// What to do with one VIP's static protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing: it is as wanted (and announced or not).
    Keep { announced: bool },
    /// `enable` it.
    Enable,
    /// `disable` it.
    Disable,
    /// It is changing state (starting, stopping, flushing): look again shortly.
    Wait,
}

/// The decision for one VIP, from its protocol's state and whether it should be announced.
fn step(state: &ProtocolState, want: bool) -> Step {
    match (state, want) {
        (ProtocolState::Up, true) => Step::Keep { announced: true },
        (ProtocolState::Down, false) => Step::Keep { announced: false },
        (ProtocolState::Down, true) => Step::Enable,
        // A protocol that is starting is enabled: disabling it now is right.
        (ProtocolState::Up | ProtocolState::Start, false) => Step::Disable,
        (ProtocolState::Start | ProtocolState::Stop | ProtocolState::Flush, true)
        | (ProtocolState::Stop | ProtocolState::Flush, false)
        | (ProtocolState::Other(_), _) => Step::Wait,
    }
}

/// Keeps BIRD announcing exactly the desired VIP routes. Blocking; see the module docs.
#[derive(Debug)]
pub struct Announcer {
    bgp: Bgp,
    options: AnnouncerOptions,
    client: BirdClient,
    requested: DesiredRoutes,
    held: bool,
    /// No pass until the first [`Announcer::set_desired`] ([`Announcer::undecided`]).
    undecided: bool,
    /// The structure BIRD runs, and on which connection we learnt it.
    loaded: Option<(u64, Structure)>,
    /// The structure BIRD last accepted (`configure check` passed), on any connection.
    accepted: Option<Structure>,
    written: Option<String>,
    routes: BTreeMap<IpAddr, RouteState>,
    sessions: Vec<SessionStatus>,
    counters: Counters,
    backoff: Backoff,
    next_pass: Option<Instant>,
    reachable: bool,
    last_error: Option<String>,
    /// When a failed pass was last logged at warning level ([`repeat_warning`]).
    warned_at: Option<Instant>,
}

/// How often the same failure is logged again at warning level: a withdrawal retries every
/// `CONFIRM_POLL` while BIRD does not answer, which logged ~250 identical warnings in 5 s.
pub const REPEAT_WARNING: Duration = Duration::from_secs(30);

/// Whether a failed pass with `message` is logged at warning level at `now`: when the failure
/// is new (the previous pass succeeded or failed otherwise), or the same one was last logged
/// [`REPEAT_WARNING`] ago; the other repeats go to debug level.
fn repeat_warning(
    previous: Option<&str>,
    message: &str,
    warned_at: Option<Instant>,
    now: Instant,
) -> bool {
    previous != Some(message)
        || warned_at.is_none_or(|t| now.saturating_duration_since(t) >= REPEAT_WARNING)
}

impl Announcer {
    /// An announcer for `bgp` with default timing. Nothing is announced and BIRD is not
    /// contacted until the first pass.
    pub fn new(bgp: Bgp) -> Self {
        Self::with_options(bgp, AnnouncerOptions::default())
    }

    /// An announcer with explicit timing.
    pub fn with_options(bgp: Bgp, options: AnnouncerOptions) -> Self {
        let client = BirdClient::new(&bgp.bird_socket, options.io_timeout);
        let backoff = Backoff {
            initial: options.backoff_initial,
            max: options.backoff_max,
            current: None,
        };
        Self {
            bgp,
            options,
            client,
            requested: DesiredRoutes::new(),
            held: false,
            undecided: false,
            loaded: None,
            accepted: None,
            written: None,
            routes: BTreeMap::new(),
            sessions: Vec::new(),
            counters: Counters::default(),
            backoff,
            next_pass: None,
            reachable: false,
            last_error: None,
            warned_at: None,
        }
    }

    /// An announcer that makes no pass — does not contact BIRD, writes nothing — until the
    /// routes are decided ([`Announcer::set_desired`]): a node that replaces another (an
    /// upgrade) must not tell BIRD "nothing" before it knows what to announce, or BIRD would
    /// withdraw, for a moment, what the replaced node announced.
    #[must_use]
    pub fn undecided(mut self) -> Self {
        self.undecided = true;
        self
    }

    /// Sets the desired routes; the next [`Announcer::poll`] applies them. Addresses of a
    /// family no neighbour carries are left out (no session would announce them).
    pub fn set_desired(&mut self, desired: DesiredRoutes) {
        if desired != self.requested || self.undecided {
            self.undecided = false;
            self.requested = desired;
            self.next_pass = None;
        }
    }

    /// Replaces the `[bgp]` settings (a configuration reload). Sessions whose settings did
    /// not change are not touched; a changed session is restarted by BIRD.
    pub fn set_bgp(&mut self, bgp: Bgp) {
        if bgp == self.bgp {
            return;
        }
        if bgp.bird_socket != self.bgp.bird_socket {
            self.client = BirdClient::new(&bgp.bird_socket, self.options.io_timeout);
            self.loaded = None;
        }
        self.bgp = bgp;
        self.next_pass = None;
    }

    /// Ends the effect of [`Announcer::withdraw_all`]: the desired routes apply again.
    pub fn resume(&mut self) {
        if self.held {
            self.held = false;
            self.next_pass = None;
        }
    }

    /// The `[bgp]` settings in use.
    pub fn bgp(&self) -> &Bgp {
        &self.bgp
    }

    /// When the next pass is due (`None`: now).
    pub fn next_pass(&self) -> Option<Instant> {
        self.next_pass
    }

    /// Runs a pass if one is due and returns when the next one is.
    pub fn poll(&mut self, now: Instant) -> Instant {
        if self.undecided {
            // woken by set_desired (the thread's inbox), or looks again
            return now + Duration::from_secs(1);
        }
        if let Some(due) = self.next_pass
            && now < due
        {
            return due;
        }
        let _ = self.reconcile(now);
        self.next_pass.unwrap_or(now)
    }

    /// Runs a pass now, records its outcome (counters, last error, when the next pass is
    /// due) and returns it.
    pub fn reconcile(&mut self, now: Instant) -> Result<Pass, BirdError> {
        let connections = self.client.connections();
        let result = self.pass(now);
        self.counters.connections += self.client.connections() - connections;
        self.reachable = self.client.is_connected();
        let wait = match &result {
            Ok(pass) => {
                self.backoff.reset();
                self.last_error = None;
                match pass {
                    Pass::Settled => self.options.resync_interval,
                    Pass::Settling => self.options.settle_interval,
                }
            }
            Err(e) => {
                self.counters.errors += 1;
                let message = e.to_string();
                if repeat_warning(self.last_error.as_deref(), &message, self.warned_at, now) {
                    tracing::warn!(error = %e, "BGP announcer: pass failed");
                    self.warned_at = Some(now);
                } else {
                    tracing::debug!(error = %e, "BGP announcer: pass failed again");
                }
                self.last_error = Some(message);
                self.backoff.next()
            }
        };
        self.next_pass = Some(now + wait);
        result
    }

    /// Withdraws every VIP and returns once BIRD confirmed it: every Stator static protocol
    /// is down and no Stator BGP session exports a route. Gives up after `timeout` (plus at
    /// most one I/O timeout). Until [`Announcer::resume`], desired routes are ignored and
    /// nothing is announced — so a late `set_desired` during shutdown cannot re-announce.
    pub fn withdraw_all(&mut self, timeout: Duration) -> Result<(), BirdError> {
        let deadline = Instant::now() + timeout;
        if !self.held {
            tracing::info!("BGP announcer: withdrawing every VIP");
        }
        self.held = true;
        let mut reason = String::from("no attempt finished");
        let result = loop {
            let now = Instant::now();
            let remaining = deadline.saturating_duration_since(now);
            if remaining.is_zero() {
                break Err(BirdError::WithdrawTimeout { timeout, reason });
            }
            self.client
                .set_timeout(self.options.io_timeout.min(remaining));
            match self.reconcile(now).and_then(|_| self.unconfirmed()) {
                Ok(None) => break Ok(()),
                Ok(Some(why)) => reason = why,
                Err(e) => reason = e.to_string(),
            }
            std::thread::sleep(
                CONFIRM_POLL.min(deadline.saturating_duration_since(Instant::now())),
            );
        };
        self.client.set_timeout(self.options.io_timeout);
        result
    }

    /// What still stands in the way of a confirmed withdrawal, if anything.
    fn unconfirmed(&mut self) -> Result<Option<String>, BirdError> {
        let protocols = self.client.show_protocols(true)?;
        if let Some(p) = protocols
            .iter()
            .find(|p| p.name.starts_with(STATIC_PREFIX) && p.state != ProtocolState::Down)
        {
            return Ok(Some(format!("{} is still {:?}", p.name, p.state)));
        }
        for n in &self.bgp.neighbors {
            if let Some(p) = protocols.iter().find(|p| p.name == n.name)
                && let Some(exported @ 1..) = p.exported_routes()
            {
                return Ok(Some(format!("{} still exports {exported} routes", n.name)));
            }
        }
        Ok(None)
    }

    /// The current state, for status and metrics.
    pub fn status(&self) -> AnnouncerStatus {
        let target = self.target();
        AnnouncerStatus {
            bird_reachable: self.reachable,
            bird_version: self.client.version().map(str::to_owned),
            withdrawing_all: self.held,
            routes: self
                .routes
                .iter()
                .map(|(address, r)| RouteStatus {
                    address: *address,
                    desired: target.announce(*address) == Some(true),
                    announced: r.announced,
                    last_change: r.last_change,
                })
                .collect(),
            sessions: self.sessions.clone(),
            counters: self.counters.clone(),
            last_error: self.last_error.clone(),
        }
    }

    /// The routes to make true: the requested ones of a family some neighbour carries, none
    /// announced while withdrawing all.
    fn target(&self) -> DesiredRoutes {
        let families: BTreeSet<bool> = self
            .bgp
            .neighbors
            .iter()
            .map(|n| n.address.is_ipv4())
            .collect();
        let routes = self.requested.filtered(|a| families.contains(&a.is_ipv4()));
        if self.held {
            routes.withdrawn()
        } else {
            routes
        }
    }

    fn pass(&mut self, now: Instant) -> Result<Pass, BirdError> {
        let target = self.target();
        let structure = Structure {
            bgp: self.bgp.clone(),
            addresses: target.addresses().collect(),
        };
        if self.accepted.as_ref() == Some(&structure) {
            // Only states changed: BIRD may read the file at any moment (a restart).
            self.write(&structure.bgp, &target)?;
        }
        let connection = self.client.connect()?;
        let mut deferred = None;
        let loaded = match &self.loaded {
            Some((c, s)) if *c == connection && *s == structure => structure,
            _ => match self.load(&structure, &target) {
                Ok(()) => {
                    // The connection BIRD confirmed on (a restarted BIRD is reconnected
                    // transparently inside `load`).
                    self.loaded = Some((self.client.connections(), structure.clone()));
                    structure
                }
                Err(e) if e.is_config_rejected() => match &self.loaded {
                    Some((c, old)) if *c == connection => {
                        deferred = Some(e);
                        old.clone()
                    }
                    _ => return Err(e),
                },
                Err(e) => return Err(e),
            },
        };
        // The states to apply, over the VIPs BIRD has.
        let states = DesiredRoutes::from_vips(
            loaded
                .addresses
                .iter()
                .map(|a| (*a, target.announce(*a) == Some(true))),
        );
        self.write(&loaded.bgp, &states)?;
        let protocols = self.client.show_protocols(true)?;
        let mut settling = self.apply(now, &loaded, &states, &protocols)?;
        if self.client.connections() != connection {
            // BIRD restarted during the pass: look again soon, on the new connection.
            settling = true;
        }
        match deferred {
            Some(e) => Err(e),
            None if settling => Ok(Pass::Settling),
            None => Ok(Pass::Settled),
        }
    }

    /// Writes the file if its text changed.
    fn write(&mut self, bgp: &Bgp, routes: &DesiredRoutes) -> Result<(), BirdError> {
        let text = render(bgp, routes);
        if self.written.as_deref() != Some(text.as_str()) {
            file::write_atomic(&bgp.bird_config, text.as_bytes())?;
            self.written = Some(text);
        }
        Ok(())
    }

    /// Writes a new structure and makes BIRD load it.
    fn load(&mut self, structure: &Structure, target: &DesiredRoutes) -> Result<(), BirdError> {
        let path = &structure.bgp.bird_config;
        let previous = file::read_existing(path)?;
        self.written = None;
        self.write(&structure.bgp, target)?;
        if let Err(e) = self.client.configure_check() {
            if e.is_config_rejected() {
                // Put back what BIRD could load, so that a restart still finds it.
                match &previous {
                    Some(bytes) => file::write_atomic(path, bytes)?,
                    None => file::remove(path)?,
                }
                self.written = None;
            }
            return Err(e);
        }
        let outcome = self.client.configure()?;
        self.accepted = Some(structure.clone());
        self.counters.configures += 1;
        tracing::info!(
            vips = structure.addresses.len(),
            neighbors = structure.bgp.neighbors.len(),
            outcome = match outcome {
                Reconfigure::Done => "reconfigured",
                Reconfigure::InProgress => "in progress",
                Reconfigure::Queued => "queued",
            },
            "BGP announcer: BIRD reconfigured"
        );
        Ok(())
    }

    /// Enables or disables VIP protocols to match `states`; true while any is in transition.
    fn apply(
        &mut self,
        now: Instant,
        loaded: &Structure,
        states: &DesiredRoutes,
        protocols: &[Protocol],
    ) -> Result<bool, BirdError> {
        let by_name: HashMap<&str, &Protocol> =
            protocols.iter().map(|p| (p.name.as_str(), p)).collect();
        let missing: Vec<String> = loaded
            .addresses
            .iter()
            .map(|a| static_protocol_name(*a))
            .chain(loaded.bgp.neighbors.iter().map(|n| n.name.clone()))
            .filter(|name| !by_name.contains_key(name.as_str()))
            .collect();
        if !missing.is_empty() {
            self.loaded = None;
            return Err(BirdError::NotIncluded {
                missing: missing.join(", "),
                bird_config: loaded.bgp.bird_config.clone(),
            });
        }
        self.sessions = loaded
            .bgp
            .neighbors
            .iter()
            .filter_map(|n| {
                let p = by_name.get(n.name.as_str())?;
                let state = p.bgp_state().unwrap_or(&p.info).to_owned();
                Some(SessionStatus {
                    name: n.name.clone(),
                    neighbor: n.address,
                    established: state == "Established",
                    state,
                    exported: p.exported_routes().unwrap_or(0),
                })
            })
            .collect();
        let gone: Vec<IpAddr> = self
            .routes
            .keys()
            .filter(|a| !loaded.addresses.contains(a))
            .copied()
            .collect();
        for address in gone {
            if self.routes.remove(&address).is_some_and(|r| r.announced) {
                self.counters.withdrawals += 1;
                tracing::info!(vip = %address, "BGP announcer: VIP withdrawn (removed)");
            }
        }
        let mut settling = false;
        for (address, want) in states.iter() {
            let name = static_protocol_name(address);
            let Some(p) = by_name.get(name.as_str()) else {
                continue; // checked above
            };
            let announced = match step(&p.state, want) {
                Step::Keep { announced } => announced,
                Step::Enable => {
                    self.client.enable(&name, "announced by Stator")?;
                    true
                }
                Step::Disable => {
                    let why = if self.held {
                        "withdrawn by Stator (all)"
                    } else {
                        "withdrawn by Stator"
                    };
                    self.client.disable(&name, why)?;
                    false
                }
                Step::Wait => {
                    settling = true;
                    self.routes.get(&address).is_some_and(|r| r.announced)
                }
            };
            self.record(address, announced, now);
        }
        Ok(settling)
    }

    fn record(&mut self, address: IpAddr, announced: bool, now: Instant) {
        let route = self.routes.entry(address).or_insert(RouteState {
            announced: false,
            last_change: None,
        });
        if route.announced == announced {
            return;
        }
        route.announced = announced;
        route.last_change = Some(now);
        if announced {
            self.counters.announcements += 1;
            tracing::info!(vip = %address, "BGP announcer: VIP announced");
        } else {
            self.counters.withdrawals += 1;
            tracing::info!(vip = %address, "BGP announcer: VIP withdrawn");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_failure_is_warned_of_once_per_interval() {
        let t0 = Instant::now();
        let late = t0 + REPEAT_WARNING;
        // a new failure: after a success, or after another failure
        assert!(repeat_warning(None, "no BIRD", None, t0));
        assert!(repeat_warning(Some("other"), "no BIRD", Some(t0), t0));
        // the same one again: quiet until the interval has passed
        assert!(!repeat_warning(Some("no BIRD"), "no BIRD", Some(t0), t0));
        assert!(!repeat_warning(
            Some("no BIRD"),
            "no BIRD",
            Some(t0),
            late - Duration::from_millis(1)
        ));
        assert!(repeat_warning(Some("no BIRD"), "no BIRD", Some(t0), late));
        // never warned (it started as a repeat): warn
        assert!(repeat_warning(Some("no BIRD"), "no BIRD", None, t0));
    }

    #[test]
    fn an_undecided_announcer_tells_bird_nothing_until_the_routes_are_set() {
        let config = stator_config::from_toml_str(
            "t.toml",
            "[node]\nname = \"lb1\"\naddress_v4 = \"10.0.0.10\"\n[dataplane]\n\
             interfaces = [\"eth0\"]\n[bgp]\nlocal_as = 65010\nrouter_id = \"10.0.0.10\"\n\
             bird_socket = \"/nonexistent/stator-test/bird.ctl\"\n[[bgp.neighbor]]\n\
             address = \"10.0.0.1\"\nremote_as = 65000\n",
        )
        .unwrap();
        let mut a = Announcer::new(config.bgp.unwrap()).undecided();
        let t0 = Instant::now();
        assert!(a.poll(t0) > t0, "undecided: no pass is due");
        assert_eq!(a.status().counters.errors, 0, "BIRD not contacted");
        // the decision, even "nothing to announce", starts the passes (here failing: no BIRD)
        a.set_desired(DesiredRoutes::new());
        a.poll(t0);
        assert_eq!(
            a.status().counters.errors,
            1,
            "a pass ran and found no BIRD"
        );
    }

    #[test]
    fn one_step_per_protocol_state() {
        use ProtocolState::*;
        let table = [
            (Up, true, Step::Keep { announced: true }),
            (Up, false, Step::Disable),
            (Down, true, Step::Enable),
            (Down, false, Step::Keep { announced: false }),
            (Start, true, Step::Wait),
            (Start, false, Step::Disable),
            (Stop, true, Step::Wait),
            (Stop, false, Step::Wait),
            (Flush, true, Step::Wait),
            (Flush, false, Step::Wait),
            (Other("?".into()), true, Step::Wait),
            (Other("?".into()), false, Step::Wait),
        ];
        for (state, want, expected) in table {
            assert_eq!(step(&state, want), expected, "{state:?}, want {want}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_maximum_and_resets() {
        let mut b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(500),
            current: None,
        };
        let steps: Vec<u128> = (0..5).map(|_| b.next().as_millis()).collect();
        assert_eq!(steps, [100, 200, 400, 500, 500]);
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(100));
    }
}
