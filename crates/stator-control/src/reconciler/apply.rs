//! Changes: reloads, drains, rebuilds after health changes, commits.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use stator_config::Config;
use tokio::time::Instant;

use super::state::{backend_states, unchecked_addresses};
use super::{ApplyReport, RETRY, Reconciler, quarantine, with_plane};
use crate::error::ControlError;
use crate::events::{Event, EventKind};
use crate::host;
use crate::ids::Assignment;
use crate::plan::{self, BackendState, Built, Drain};
use crate::view::Phase;

impl Reconciler {
    pub(super) async fn apply(
        &mut self,
        text: String,
        source: String,
        origin: super::Origin,
        if_match: Option<u64>,
    ) -> Result<ApplyReport, ControlError> {
        let started = Instant::now();
        self.takes_changes()?;
        if let Some(expected) = if_match
            && expected != self.config_generation
        {
            return Err(ControlError::GenerationMismatch {
                expected,
                current: self.config_generation,
            });
        }
        let config =
            Arc::new(stator_config::from_toml_str(&source, &text).map_err(ControlError::Config)?);
        host::reloadable(&self.config, &config)?;
        if origin == super::Origin::Api {
            host::api_files_unchanged(&self.config, &config)?;
        }
        if self.host_checks {
            host::forwarding_enabled(&config)?;
        }
        let tokens = host::resolve_tokens(&config)?;
        let trace_keys = host::trace_keys(&config)?;
        host::tls_files(&*self.tls, &config)?;
        let plan = config.health_plan();
        let (ids, assignment) = self
            .ids
            .assign(&config, Instant::now(), quarantine(&config))?;
        let drains: BTreeMap<String, Drain> = self
            .drains
            .iter()
            .filter(|(name, _)| config.backends.iter().any(|b| &b.name == *name))
            .map(|(n, d)| (n.clone(), *d))
            .collect();
        let states = backend_states(&config, &plan, &drains, Instant::now(), |k| {
            self.runner.prospective(k)
        });
        let next = self.generation + 1;
        let (built, build_time) = build_blocking(
            &config,
            &assignment,
            states,
            next,
            self.built.clone().or_else(|| self.seed.clone()),
            trace_keys,
        )
        .await?;
        // The listeners' sockets are bound before anything commits: a port taken refuses the
        // reload (with the listener's field path) and the running listeners keep serving.
        let listeners = self.listeners.prepare(&config)?;
        let commit_time = self.commit(&built).await?;
        // Committed: the new config is the running one from here on.
        self.listeners.commit(listeners);
        self.note_new_ids(&assignment);
        let old_bgp = self.config.bgp.clone();
        self.config = Arc::clone(&config);
        self.text = Arc::from(text);
        self.source = source;
        self.config_generation = next;
        self.applied_at = SystemTime::now();
        self.ids = ids;
        self.assignment = assignment;
        self.drains = drains;
        self.runner
            .apply(&plan, unchecked_addresses(&config, &plan));
        self.plan = plan;
        *self.tokens.write().unwrap_or_else(PoisonError::into_inner) = tokens;
        self.trace_keys = trace_keys;
        self.accept(built, build_time, commit_time);
        if old_bgp != config.bgp {
            self.reconfigure_announcer().await;
        }
        self.announce();
        self.stats.reloads_ok += 1;
        let took = started.elapsed();
        self.stats.reload.observe(took);
        self.publish();
        let b = self.built.as_deref().map_or(0, Built::tables_rebuilt);
        self.events.push(
            Event::new(
                EventKind::Reload,
                format!(
                    "configuration from {} applied in {:.1} ms ({b} Maglev tables rebuilt)",
                    self.source,
                    took.as_secs_f64() * 1e3
                ),
            )
            .generation(self.config_generation),
        );
        tracing::info!(
            config_generation = self.config_generation,
            source = %self.source,
            took = ?took,
            tables_rebuilt = b,
            "configuration applied"
        );
        Ok(ApplyReport {
            config_generation: self.config_generation,
            generation: self.generation,
            build_seconds: build_time.as_secs_f64(),
            commit_seconds: commit_time.as_secs_f64(),
            reload_seconds: took.as_secs_f64(),
            tables_rebuilt: b,
            vips: config.vips.len(),
            reals: self.built.as_ref().map_or(0, |b| b.snapshot.reals.len()),
            warnings: config.warnings().iter().map(ToString::to_string).collect(),
        })
    }

    pub(super) async fn drain(
        &mut self,
        backend: String,
        timeout: Option<Duration>,
    ) -> Result<(), ControlError> {
        self.takes_changes()?;
        if !self.config.backends.iter().any(|b| b.name == backend) {
            return Err(ControlError::UnknownBackend { id: backend });
        }
        let timeout = timeout.unwrap_or(self.config.api.drain_timeout);
        let drain = if timeout.is_zero() {
            Drain::TimedOut
        } else {
            Drain::Until(Instant::now() + timeout)
        };
        tracing::info!(backend = %backend, timeout = ?timeout, "backend drained");
        let previous = self.drains.insert(backend.clone(), drain);
        if let Err(e) = self.rebuild(false).await {
            match previous {
                Some(d) => self.drains.insert(backend, d),
                None => self.drains.remove(&backend),
            };
            return Err(e);
        }
        self.events.push(
            Event::new(
                EventKind::Drain,
                format!(
                    "{backend} drained: no new connections, existing ones kept for {}",
                    stator_config::duration::format_duration(timeout)
                ),
            )
            .backend(&backend),
        );
        Ok(())
    }

    pub(super) async fn undrain(&mut self, backend: String) -> Result<(), ControlError> {
        self.takes_changes()?;
        if !self.config.backends.iter().any(|b| b.name == backend) {
            return Err(ControlError::UnknownBackend { id: backend });
        }
        let Some(previous) = self.drains.remove(&backend) else {
            return Ok(());
        };
        tracing::info!(backend = %backend, "backend undrained");
        if let Err(e) = self.rebuild(false).await {
            self.drains.insert(backend, previous);
            return Err(e);
        }
        self.events
            .push(Event::new(EventKind::Undrain, format!("{backend} undrained")).backend(&backend));
        Ok(())
    }

    /// Builds a snapshot of the running config in the current states and commits it unless
    /// it equals the one forwarding (`force` commits anyway).
    pub(super) async fn rebuild(&mut self, force: bool) -> Result<ApplyReport, ControlError> {
        let states = backend_states(
            &self.config,
            &self.plan,
            &self.drains,
            Instant::now(),
            |k| self.runner.state(k),
        );
        let next = self.generation + 1;
        let (built, build_time) = build_blocking(
            &self.config,
            &self.assignment,
            states,
            next,
            self.built.clone().or_else(|| self.seed.clone()),
            self.trace_keys,
        )
        .await?;
        let same = self.built.as_ref().is_some_and(|old| {
            old.snapshot.vips == built.snapshot.vips
                && old.snapshot.reals == built.snapshot.reals
                && old.snapshot.node == built.snapshot.node
        });
        let unchanged = self
            .built
            .as_ref()
            .filter(|_| same && !force)
            .map(|old| old.snapshot.clone());
        let commit_time = if let Some(snapshot) = unchanged {
            // Nothing the data plane sees changed (e.g. a backend already down by another
            // check): keep the snapshot, update what the API shows.
            self.built = Some(Arc::new(Built {
                snapshot,
                vips: built.vips,
            }));
            self.note_health();
            self.announce();
            self.publish();
            Duration::ZERO
        } else {
            let t = self.commit(&built).await?;
            self.accept(built, build_time, t);
            self.announce();
            self.publish();
            t
        };
        Ok(ApplyReport {
            config_generation: self.config_generation,
            generation: self.generation,
            build_seconds: build_time.as_secs_f64(),
            commit_seconds: commit_time.as_secs_f64(),
            reload_seconds: 0.0,
            tables_rebuilt: self.built.as_deref().map_or(0, Built::tables_rebuilt),
            vips: self.config.vips.len(),
            reals: self.built.as_ref().map_or(0, |b| b.snapshot.reals.len()),
            warnings: Vec::new(),
        })
    }

    pub(super) async fn rebuild_logged(&mut self, why: &str) {
        if self.phase != Phase::Running {
            return;
        }
        if let Err(e) = self.rebuild(false).await {
            tracing::error!(error = %e, cause = why, "commit failed; the previous snapshot stays, retrying in 1s");
            self.record_error(format!("commit after {why} failed: {e}"));
            self.events.push(Event::new(
                EventKind::CommitFailed,
                format!("commit after {why} failed (the previous snapshot forwards): {e}"),
            ));
            self.retry_at = Some(Instant::now() + RETRY);
            self.publish();
        }
    }

    pub(super) async fn commit(&mut self, built: &Built) -> Result<Duration, ControlError> {
        let snap = built.snapshot.clone();
        let result = with_plane(&self.plane, move |p| p.commit(&snap)).await?;
        match result {
            Ok(info) => {
                self.stats.commits_ok += 1;
                self.stats.commit.observe(info.total());
                Ok(info.total())
            }
            Err(e) => {
                self.stats.commits_failed += 1;
                Err(e.into())
            }
        }
    }

    pub(super) fn accept(&mut self, built: Built, build_time: Duration, _commit: Duration) {
        self.stats.build.observe(build_time);
        for (v, c) in built.vips.iter().zip(&self.config.vips) {
            if v.previous_dropped {
                tracing::warn!(vip = %c.name, slots_per_generation = self.config.dataplane.slots_per_generation,
                               "second chance: no room for this VIP's previous table; raise dataplane.slots_per_generation");
            }
        }
        self.generation = built.snapshot.generation;
        self.committed_at = Some(SystemTime::now());
        self.built = Some(Arc::new(built));
        self.seed = None;
        self.retry_at = None;
        self.note_health();
    }
}

async fn build_blocking(
    config: &Arc<Config>,
    assignment: &Assignment,
    states: Vec<BackendState>,
    generation: u64,
    previous: Option<Arc<Built>>,
    trace_keys: stator_abi::TraceKeys,
) -> Result<(Built, Duration), ControlError> {
    let config = Arc::clone(config);
    let assignment = assignment.clone();
    let now = Instant::now(); // the reconciler's clock: previous tables' grace
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now(); // CPU time, whatever tokio's clock says
        let built = plan::build_keyed(
            &config,
            &assignment,
            &states,
            generation,
            previous.as_deref(),
            trace_keys,
            now,
        )?;
        Ok((built, started.elapsed()))
    })
    .await
    .map_err(|e| ControlError::io("snapshot build task", std::io::Error::other(e.to_string())))?
}
