//! Electing one rebalancer per region: a lock with expiry in the region's own
//! Redis (`ml:rg:{lock}`, the holder's id, `LOCK_TTL`). Every agent runs a round
//! every `ROUND`: the holder renews, the others take the lock if it has expired.
//! When the leader dies, another agent holds the lock within `LOCK_TTL + ROUND`
//! (2.4 s). An agent acts as leader only while its last renewal is recent enough
//! that the lock cannot have expired yet (`VALID`), so two agents never both
//! think they lead, short of a process stalling mid-tick.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::conn::{RegionConn, RegionError};
use crate::regions::metrics::RegionMetrics;
use crate::shutdown::Shutdown;
use meshlimit_store::redis::keys::region::LOCK;
use meshlimit_store::redis::script::{ELECT_SCRIPT, RELEASE_SCRIPT};

/// How long the lock lives without renewal.
pub(crate) const LOCK_TTL: Duration = Duration::from_millis(2_000);
/// How often every agent runs an election round.
pub(crate) const ROUND: Duration = Duration::from_millis(400);
/// How long after sending a successful renewal this agent may act as leader: well
/// inside the lock's life, which starts only when Redis ran the renewal.
const VALID: Duration = Duration::from_millis(1_500);

/// This agent's standing in its region's election.
#[derive(Debug)]
pub(crate) struct Leadership {
    id: String,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Until when this agent leads, if it does.
    valid_until: Option<Instant>,
    /// The holder last read from the lock.
    holder: Option<String>,
}

impl Leadership {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            state: Mutex::new(State::default()),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// True while this agent holds the lock for sure.
    pub(crate) fn is_leader(&self, now: Instant) -> bool {
        self.lock().valid_until.is_some_and(|t| t > now)
    }

    /// The lock's holder as last read.
    pub(crate) fn holder(&self) -> Option<String> {
        self.lock().holder.clone()
    }

    /// Records a round's answer: `holder` read at a call sent at `sent`.
    pub(crate) fn observe(&self, holder: Option<String>, sent: Instant) {
        let mut s = self.lock();
        s.valid_until = (holder.as_deref() == Some(self.id.as_str())).then_some(sent + VALID);
        s.holder = holder;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs election rounds until shutdown, then gives the lock up if held.
pub async fn run(
    conn: Arc<RegionConn>,
    lead: Arc<Leadership>,
    metrics: Arc<RegionMetrics>,
    mut shutdown: Shutdown,
) {
    let mut tick = tokio::time::interval(ROUND);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let was = lead.is_leader(Instant::now());
                if let Err(e) = round(&conn, &lead).await {
                    tracing::debug!("region election: {e}");
                }
                let is = lead.is_leader(Instant::now());
                if is != was {
                    tracing::info!(agent = lead.id(), leader = is, "region rebalancer leadership changed");
                }
                metrics.region_leader(is, lead.holder().as_deref());
            }
            _ = shutdown.wait() => break,
        }
    }
    if lead.is_leader(Instant::now()) {
        let release = redis::cmd("EVAL")
            .arg(RELEASE_SCRIPT)
            .arg(1)
            .arg(LOCK)
            .arg(lead.id())
            .to_owned();
        let _ = conn.query::<i64>(&release).await;
    }
}

/// One round: take or renew the lock, learn who holds it.
pub(crate) async fn round(conn: &RegionConn, lead: &Leadership) -> Result<(), RegionError> {
    let sent = Instant::now();
    let ttl = u64::try_from(LOCK_TTL.as_millis()).unwrap_or(2_000);
    let holder: Option<String> = conn
        .query(
            redis::cmd("EVAL")
                .arg(ELECT_SCRIPT)
                .arg(1)
                .arg(LOCK)
                .arg(lead.id())
                .arg(ttl),
        )
        .await?;
    lead.observe(holder, sent);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leads_only_while_the_renewal_is_fresh() {
        let lead = Leadership::new("me");
        let t0 = Instant::now();
        assert!(!lead.is_leader(t0));
        lead.observe(Some("me".into()), t0);
        assert!(lead.is_leader(t0 + Duration::from_millis(1_400)));
        assert!(!lead.is_leader(t0 + VALID));
        lead.observe(Some("other".into()), t0);
        assert!(!lead.is_leader(t0));
        assert_eq!(lead.holder().as_deref(), Some("other"));
        assert!(VALID < LOCK_TTL);
    }
}
