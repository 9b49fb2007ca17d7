//! The forwarder watchdog: the paper's "the controller periodically checks the health status
//! of the forwarder" (§2.2), once a second.
//!
//! A check is [`DataPlane::check`](stator_plane::DataPlane::check): attached where it
//! should be with our program, maps answering, the self-test packet answered. The first
//! result decides; after a failure the forwarder counts as healthy again only after
//! [`RISE`] consecutive passes, so a forwarder that flaps does not make BGP flap as fast.
//! A failure withdraws every VIP at once (the reconciler does it on the event). From the
//! second consecutive failure on, the watchdog also tries to repair: it attaches the program
//! again to the configured interfaces (an interface still attached keeps its link; one whose
//! link was removed behind Stator's back gets a new one). It never repairs while the node is
//! stopping.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::ControlError;
use crate::reconciler::{ForwarderEvent, SharedPlane, with_plane};

/// Time between two checks.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Consecutive passes after a failure before the forwarder is healthy again.
pub const RISE: u32 = 2;

/// Starts the watchdog.
pub fn spawn(
    plane: SharedPlane,
    interfaces: Vec<String>,
    stopping: Arc<AtomicBool>,
    events: mpsc::UnboundedSender<ForwarderEvent>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut state: Option<bool> = None;
        let mut passes = 0u32;
        let mut failures = 0u32;
        let mut tick = tokio::time::interval(CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let repair = failures >= 1;
            let ifaces = interfaces.clone();
            let stop = Arc::clone(&stopping);
            let result = with_plane(&plane, move |p| {
                let checked = p.check();
                if checked.is_err() && repair && !stop.load(Ordering::SeqCst) {
                    match p.attach(&ifaces) {
                        Ok(attached) => {
                            for a in attached.iter().filter(|a| !a.replaced) {
                                tracing::warn!(iface = %a.iface, mode = %a.mode, "re-attached the forwarder");
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "re-attaching the forwarder failed"),
                    }
                }
                checked
            })
            .await;
            let event = match result.and_then(|r| r.map_err(ControlError::from)) {
                Ok(()) => {
                    failures = 0;
                    passes += 1;
                    let becomes = state.is_none() || (state == Some(false) && passes >= RISE);
                    becomes.then(|| {
                        state = Some(true);
                        ForwarderEvent {
                            healthy: true,
                            reason: None,
                        }
                    })
                }
                Err(e) => {
                    passes = 0;
                    failures += 1;
                    (state != Some(false)).then(|| {
                        state = Some(false);
                        ForwarderEvent {
                            healthy: false,
                            reason: Some(match e {
                                ControlError::Unhealthy { reason } => reason,
                                other => other.to_string(),
                            }),
                        }
                    })
                }
            };
            if let Some(event) = event
                && events.send(event).is_err()
            {
                return;
            }
        }
    })
}
