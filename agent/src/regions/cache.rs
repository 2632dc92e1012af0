//! Every agent's side of the exchange, with its own Redis only: it flushes the
//! demand it counted a few times a period (one pipeline), and once a period
//! refreshes its cached shares as soon as its rebalancer has published them. When
//! its Redis does not answer it keeps the cached shares: the split degrades to
//! static, never to unlimited.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::clock::{self, PERIOD};
use super::conn::{RegionConn, RegionError};
use super::exchange;
use super::table::ShareTable;
use super::Shares;
use crate::regions::metrics::RegionMetrics;
use crate::shutdown::Shutdown;

/// Demand is flushed this often, a little after each slice of the period ends;
/// a flush after the rebalancer sealed a period counts in the next one.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(250);
pub(crate) const FLUSH_AT: Duration = Duration::from_millis(2);
/// The refresh looks for the period's shares from this offset on ...
pub(crate) const REFRESH_AT: Duration = Duration::from_millis(12);
/// ... this often for `REFRESH_FAST` (a healthy rebalancer publishes within
/// it), then twice as long each time up to `REFRESH_POLL_MAX`, so a region whose
/// rebalancer is stuck costs each agent about 20 reads a period, not 160 ...
const REFRESH_POLL: Duration = Duration::from_millis(5);
const REFRESH_FAST: Duration = Duration::from_millis(60);
const REFRESH_POLL_MAX: Duration = Duration::from_millis(100);
/// ... for at most this long, then keeps what it has until the next period.
const REFRESH_FOR: Duration = Duration::from_millis(800);

/// Flushes the agent's demand until shutdown.
pub(crate) async fn flush_loop(
    conn: Arc<RegionConn>,
    shares: Shares,
    metrics: Arc<RegionMetrics>,
    mut shutdown: Shutdown,
) {
    loop {
        tokio::select! {
            _ = clock::at_offset(FLUSH_EVERY, FLUSH_AT) => {}
            _ = shutdown.wait() => return,
        }
        for (period, demand) in shares.take_demand() {
            if demand.is_empty() {
                continue;
            }
            let result = exchange::flush(&conn, period, demand).await;
            if let Err(e) = &result {
                tracing::debug!("demand flush: {e}");
            }
            metrics.region_flush(result.is_ok());
        }
    }
}

/// Refreshes the cached shares once a period until shutdown.
pub(crate) async fn refresh_loop(
    conn: Arc<RegionConn>,
    shares: Shares,
    metrics: Arc<RegionMetrics>,
    mut shutdown: Shutdown,
) {
    loop {
        let period = tokio::select! {
            p = clock::at_offset(PERIOD, REFRESH_AT) => p,
            _ = shutdown.wait() => return,
        };
        let until = Instant::now() + REFRESH_FOR;
        let result = refresh(&conn, &shares, period.saturating_sub(1), until).await;
        match &result {
            Ok(true) => metrics.region_refresh("ok", clock::now_ms()),
            Ok(false) => metrics.region_refresh("unchanged", clock::now_ms()),
            Err(e) => {
                tracing::debug!("shares refresh: {e}");
                metrics.region_refresh("error", clock::now_ms());
            }
        }
        metrics.region_shares(&shares.table(), clock::now_ms());
    }
}

/// Reads the region's shares once they are published for `want` (or anything
/// newer than the cache), polling until `until`. True when the cache changed.
pub(crate) async fn refresh(
    conn: &Arc<RegionConn>,
    shares: &Shares,
    want: u64,
    until: Instant,
) -> Result<bool, RegionError> {
    let (started, mut pause) = (Instant::now(), REFRESH_POLL);
    loop {
        let cached = shares.table().period;
        let published = exchange::published_period(conn).await?;
        if let Some(p) = published.filter(|p| cached < Some(*p)) {
            let fields = exchange::read_published(conn).await?;
            shares.install(ShareTable::from_fields(Some(p), fields));
            return Ok(true);
        }
        if published.is_some_and(|p| p >= want) || Instant::now() + pause > until {
            return Ok(false);
        }
        tokio::time::sleep(pause).await;
        if started.elapsed() > REFRESH_FAST {
            pause = (pause * 2).min(REFRESH_POLL_MAX);
        }
    }
}
