//! Withdrawal without the controller: what `stator withdraw` does after `stator run` died,
//! hung and was killed, or could not start (the unit's `ExecStopPost=`).
//!
//! With the configuration, [`withdraw_configured`] is the announcer's own shutdown: an
//! [`Announcer`] that knows every VIP address of the configuration, none of them to be
//! announced, runs [`Announcer::withdraw_all`] — it rewrites Stator's BIRD file with every VIP
//! disabled (so a BIRD that restarts stays withdrawn), asks BIRD to reconfigure, disables the
//! static protocols still up, and returns once BIRD confirmed that no Stator route is
//! exported on any Stator session.
//!
//! Without it (the file is gone or no longer valid), [`withdraw_unconfigured`] asks BIRD at
//! `socket` itself: it disables every protocol whose name starts with
//! [`crate::routes::STATIC_PREFIX`] and returns once BIRD shows each of them down. It cannot
//! rewrite Stator's file (it does not know where it is): a BIRD restarted before the
//! controller comes back would announce what the file last said.

use std::path::Path;
use std::time::{Duration, Instant};

use stator_config::Config;

use crate::announcer::Announcer;
use crate::client::BirdClient;
use crate::error::BirdError;
use crate::routes::{DesiredRoutes, STATIC_PREFIX};
use crate::show::ProtocolState;

/// How often the unconfigured withdrawal looks again whether BIRD has finished.
const POLL: Duration = Duration::from_millis(20);

/// Withdraws every VIP of `config` through BIRD and waits (up to `timeout`) for BIRD to
/// confirm. `Ok(false)` when the configuration has no `[bgp]` (nothing is announced).
///
/// # Errors
/// BIRD did not confirm within `timeout` (unreachable, refused, still exporting).
pub fn withdraw_configured(config: &Config, timeout: Duration) -> Result<bool, BirdError> {
    let Some(bgp) = config.bgp.clone() else {
        return Ok(false);
    };
    let mut announcer = Announcer::new(bgp);
    announcer.set_desired(DesiredRoutes::from_config(config, |_| false));
    announcer.withdraw_all(timeout)?;
    Ok(true)
}

/// Disables every Stator VIP protocol BIRD runs (BIRD's control socket at `socket`) and
/// waits (up to `timeout`) until BIRD shows each down. Returns how many were up.
///
/// # Errors
/// BIRD unreachable, a refused command, or a protocol still up at the deadline.
pub fn withdraw_unconfigured(socket: &Path, timeout: Duration) -> Result<usize, BirdError> {
    let deadline = Instant::now() + timeout;
    let mut client = BirdClient::new(socket, timeout.min(Duration::from_secs(2)));
    let mut disabled = 0;
    loop {
        let reason = match pass(&mut client, &mut disabled) {
            Ok(None) => return Ok(disabled),
            Ok(Some(why)) => why,
            Err(e) => e.to_string(),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BirdError::WithdrawTimeout { timeout, reason });
        }
        std::thread::sleep(POLL.min(left));
    }
}

/// One look: disables the Stator protocols still up; `None` once every one is down.
fn pass(client: &mut BirdClient, disabled: &mut usize) -> Result<Option<String>, BirdError> {
    client.connect()?;
    let mut waiting = None;
    for p in client.show_protocols(false)? {
        if !p.name.starts_with(STATIC_PREFIX) || p.state == ProtocolState::Down {
            continue;
        }
        if matches!(p.state, ProtocolState::Up | ProtocolState::Start) {
            client.disable(&p.name, "stator withdraw: the controller is gone")?;
            *disabled += 1;
        }
        waiting.get_or_insert_with(|| format!("{} is still {:?}", p.name, p.state));
    }
    Ok(waiting)
}
