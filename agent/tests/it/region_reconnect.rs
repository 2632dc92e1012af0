//! A peer region's Redis that goes away and comes back answers the first call
//! made a probe's reach after its return (`RegionConn`): a rebalancer reads
//! every region once a period, so a first call that failed would hold the
//! shares a period longer.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use meshlimit_agent::config::StoreSpec;
use meshlimit_agent::regions::conn::{RegionConn, PROBE_EVERY};
use meshlimit_store::redis::client::Connect;
use meshlimit_tests::RedisServer;

#[tokio::test]
async fn the_first_call_after_a_peer_returns_is_answered() {
    let mut peer = RedisServer::start();
    let spec = StoreSpec::parse(&peer.url()).unwrap();
    let deadline = Duration::from_millis(250);
    let conn = RegionConn::new("us", &spec, &Connect::default(), deadline).unwrap();
    let cmd = redis::cmd("PING");
    let ping = || conn.query::<String>(&cmd);
    assert_eq!(ping().await.unwrap(), "PONG");
    peer.kill();
    // Calls fail while it is gone, and so do the reconnections they start
    // (each over well within the pause).
    for _ in 0..3 {
        let down = ping().await;
        assert!(down.is_err(), "{down:?}");
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    peer.restart();
    // The probe reconnects within two of its periods (the first ping after a
    // failed reconnection starts the next one) and a deadline: the property's
    // own bound, not a wait for something a test could see.
    tokio::time::sleep(2 * PROBE_EVERY + deadline).await;
    assert_eq!(ping().await.unwrap(), "PONG");
}
