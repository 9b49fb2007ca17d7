//! The node's file descriptors (docs/operations.md, "Descriptors and floods"): the limit
//! raised at start, the reserve the configuration calls for, and the budget the proxy tier
//! draws every client connection, upstream connection and UDP session socket from.
//!
//! - At start, [`raise_limit`] lifts the soft `RLIMIT_NOFILE` to the hard one (the systemd
//!   unit sets `LimitNOFILE=1048576`; nginx's `worker_rlimit_nofile` and HAProxy do the same)
//!   and logs what the node got.
//! - Just before the listeners start, [`NodeDescriptors::start`] counts what the process
//!   holds and sizes the budget: the limit less the reserved parts of the configuration's
//!   [`stator_config::DescriptorPlan`] — health checks, the admin API's connections per
//!   endpoint, BIRD, the listeners' own sockets and runtimes, a spare — and what was already
//!   open. A flood of any size then ends in refusals the proxy counts, never in `EMFILE` for
//!   a health probe or an API accept. Where the reserve leaves too little to serve one client
//!   per listener worker, the start is refused; where only the worst case does not fit, it is
//!   logged with the settings to blame.
//! - A reload sizes the budget again for the new configuration (the process part stays what
//!   was counted at start), and is refused where the start would be.

use std::sync::{Arc, Mutex, PoisonError};

use stator_config::{Config, DescriptorPlan, Fit};
use stator_proxy::DescriptorBudget;

use crate::error::ControlError;

/// Raises the soft descriptor limit to the hard one and returns the limit that applies now
/// (`None`: unlimited), logged. A refusal (it should not happen: raising up to the hard limit
/// needs no privilege) is logged and the limit as it is returned.
pub fn raise_limit() -> Option<u64> {
    let before = stator_sys::limits::nofile();
    match stator_sys::limits::raise_nofile() {
        Ok(now) => {
            tracing::info!(
                soft = ?now.soft,
                hard = ?now.hard,
                was = ?before.soft,
                "descriptor limit (RLIMIT_NOFILE): soft raised to the hard limit"
            );
            now.soft
        }
        Err(e) => {
            tracing::warn!(error = %e, soft = ?before.soft, hard = ?before.hard,
                           "cannot raise the descriptor limit");
            before.soft
        }
    }
}

/// How the budget was sized, for the API and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizing {
    /// The descriptor limit (`None`: unlimited, or not sized yet).
    pub limit: Option<u64>,
    /// What the process held before the listeners started.
    pub process: u64,
    /// Kept from the proxy tier: the plan's reserved parts, `process` included.
    pub reserve: u64,
    /// The configuration's worst case.
    pub worst: u64,
}

/// The node's descriptors: the budget the proxy tier draws from, and how it was sized.
#[derive(Debug, Default)]
pub struct NodeDescriptors {
    /// What the proxy's workers take descriptors from (unlimited until sized).
    pub budget: Arc<DescriptorBudget>,
    sizing: Mutex<Sizing>,
}

impl NodeDescriptors {
    /// Sizes the budget at start: `limit` is the descriptor limit now, `open` the descriptors
    /// the process holds before its listeners start; `workers` the worker count of a
    /// listener that sets none.
    ///
    /// # Errors
    /// The reserve leaves too little to serve one client per listener worker (the field is the
    /// setting that needs the most).
    pub fn start(
        &self,
        config: &Config,
        workers: usize,
        limit: Option<u64>,
        open: u64,
    ) -> Result<(), ControlError> {
        {
            let mut s = self.lock();
            s.limit = limit;
            s.process = open;
        }
        let sizing = self.plan(config, workers)?;
        self.apply(sizing);
        Ok(())
    }

    /// How `config` would size the budget (the process part as counted at start), logged
    /// when its worst case does not fit the limit.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn plan(&self, config: &Config, workers: usize) -> Result<Sizing, ControlError> {
        let Sizing { limit, process, .. } = *self.lock();
        let plan = config.descriptor_plan(workers).with_process(process);
        let sizing = Sizing {
            limit,
            process,
            reserve: plan.reserved(),
            worst: plan.total(),
        };
        let Some(limit) = limit else {
            return Ok(sizing);
        };
        let field = blame(&plan);
        match plan.fit(limit) {
            Fit::Fits => {}
            Fit::Short => tracing::warn!(
                field = %field,
                limit,
                worst = plan.total(),
                budget = plan.budget(limit),
                "the worst case of descriptors does not fit the limit: the listeners get the \
                 budget and refuse what is beyond it (counted as `descriptors`); health checks \
                 and the admin API keep theirs. {plan}"
            ),
            Fit::Unworkable => {
                return Err(ControlError::Host {
                    field,
                    reason: format!(
                        "the descriptor limit ({limit}) leaves the listeners {} descriptors \
                         once health checks, the admin API and the process have theirs ({}): \
                         fewer than one client per worker needs ({}). Raise the limit \
                         (LimitNOFILE= in the systemd unit, or `ulimit -Hn`) or reserve less. \
                         {plan}",
                        plan.budget(limit),
                        plan.reserved(),
                        plan.min_traffic,
                    ),
                });
            }
        }
        Ok(sizing)
    }

    /// Makes `sizing` the running one: the budget's capacity follows (descriptors held
    /// beyond a smaller one stay held; new ones wait for them).
    pub fn apply(&self, sizing: Sizing) {
        let capacity = sizing
            .limit
            .map_or(u64::MAX, |l| l.saturating_sub(sizing.reserve));
        self.budget.set_capacity(capacity);
        let previous = std::mem::replace(&mut *self.lock(), sizing);
        if previous != sizing {
            tracing::info!(
                limit = ?sizing.limit,
                reserve = sizing.reserve,
                process = sizing.process,
                budget = capacity,
                worst = sizing.worst,
                "descriptor budget of the proxy tier"
            );
        }
    }

    /// How the budget is sized now.
    pub fn sizing(&self) -> Sizing {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sizing> {
        // plain numbers: valid whatever a panicked holder was doing
        self.sizing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The setting a message about `plan` points at: the traffic part that needs the most, else
/// the API's connections.
fn blame(plan: &DescriptorPlan) -> String {
    plan.largest_traffic()
        .map_or_else(|| "api.max_connections".to_owned(), |p| p.path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[node]
name = "lb"
[dataplane]
mode = "none"
[[pool]]
name = "echo"
[[pool.backend]]
address = "127.0.0.1"
port = 7
[[listener]]
name = "echo"
address = "127.0.0.1:7007"
protocol = "udp"
pool = "echo"
workers = 2
"#;

    #[test]
    fn the_budget_is_the_limit_less_the_reserve_and_too_little_refuses() {
        let config = stator_config::from_toml_str("t.toml", CONFIG).unwrap();
        let d = NodeDescriptors::default();
        assert_eq!(d.budget.capacity(), u64::MAX, "unlimited until sized");
        d.start(&config, 1, Some(4096), 30).unwrap();
        let s = d.sizing();
        let plan = config.descriptor_plan(1).with_process(30);
        assert_eq!(s.reserve, plan.reserved());
        assert_eq!(d.budget.capacity(), 4096 - plan.reserved());
        assert!(
            s.worst > 4096,
            "two workers of 16384 sessions do not fit: logged"
        );
        // a limit that leaves less than one session per worker refuses, naming the setting
        let e = NodeDescriptors::default()
            .start(&config, 1, Some(plan.reserved() + 1), 30)
            .unwrap_err();
        assert!(
            matches!(&e, ControlError::Host { field, .. } if field == "listener[0].udp.max_sessions"),
            "{e}"
        );
        // no limit: no bound
        let free = NodeDescriptors::default();
        free.start(&config, 1, None, 30).unwrap();
        assert_eq!(free.budget.capacity(), u64::MAX);
    }
}
