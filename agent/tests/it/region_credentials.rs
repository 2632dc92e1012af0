//! Each region's Redis is reached with that region's own credentials, resolved
//! from `--region-credentials-dir` as the agent does at start, against real
//! redis-servers with different passwords.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use meshlimit_agent::config::{Cli, Command, StoreSpec};
use meshlimit_agent::regions::conn::RegionConn;
use meshlimit_tests::RedisServer;

#[tokio::test]
async fn a_peer_gets_its_own_password_and_never_this_regions() {
    // Passwords set once started: the harness waits for an unauthenticated PING.
    let (own, peer) = (RedisServer::start(), RedisServer::start());
    own.cmd(&["CONFIG", "SET", "requirepass", "own-secret"]);
    peer.cmd(&["CONFIG", "SET", "requirepass", "peer-secret"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("us.password"), "peer-secret\n").unwrap();
    let args = [
        "meshlimit-agent",
        "run",
        "--rules",
        "r.yaml",
        "--store",
        &own.url(),
        "--redis-password",
        "own-secret",
        "--region-credentials-dir",
        dir.path().to_str().unwrap(),
    ];
    let Ok(Cli {
        command: Command::Run(args),
    }) = Cli::parse_from_args(args)
    else {
        panic!("flags refused")
    };
    let deadline = Duration::from_secs(2);
    let ping = |conn: RegionConn| async move { conn.query::<String>(&redis::cmd("PING")).await };

    let spec = StoreSpec::parse(&own.url()).unwrap();
    let own_conn = RegionConn::new("eu", &spec, &args.redis_connect().unwrap(), deadline).unwrap();
    assert_eq!(ping(own_conn).await.unwrap(), "PONG");

    let spec = StoreSpec::parse(&peer.url()).unwrap();
    let none = |_: &str| None;
    let us = args.region_connect("us", &spec, none).unwrap();
    let peer_conn = RegionConn::new("us", &spec, &us, deadline).unwrap();
    assert_eq!(ping(peer_conn).await.unwrap(), "PONG");

    // A peer without credentials of its own is not sent this region's: the
    // same server refuses it.
    let ap = args.region_connect("ap", &spec, none).unwrap();
    assert!(ap.password.is_none());
    let refused = ping(RegionConn::new("ap", &spec, &ap, deadline).unwrap()).await;
    assert!(refused.is_err(), "{refused:?}");
}
