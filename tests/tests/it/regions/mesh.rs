//! Regions on loopback: one redis-server per region and agents in each, every
//! agent told about the other regions with `--peer-region`.

use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::relay::Relay;
use meshlimit_tests::{
    sample, try_request, wait_for, Agent, AgentOptions, Probe, RedisCluster, RedisServer,
};

/// A global rule: 100 requests per second, burst 50.
pub const RULES: &str = r#"
version: 1
rules:
  - name: g
    key: [{ header: x-key }]
    limit: { requests: 100, per: 1s, burst: 50 }
    scope: global
  - name: ge
    key: [{ header: x-key }]
    limit: { requests: 100, per: 1s, burst: 50 }
    scope: global
    accuracy: exact
  - name: local
    key: [{ header: x-key }]
    limit: { requests: 10, per: 1h }
    accuracy: exact
"#;
/// The global rule's rate (tokens per second) and burst.
pub const L: f64 = 100.0;
pub const BURST: f64 = 50.0;
pub const FLOOR: f64 = 0.1;
/// The key every load test offers.
pub const KEY: &str = "g|k";
/// 95% of the largest share a region can hold with three regions (80%).
pub const CONVERGED: f64 = 0.95 * (1.0 - 2.0 * FLOOR);

/// The timing tests run one at a time: two of them at once on two shared cores
/// would measure the machine, not the limiter.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Seconds of Unix time (the clock the agents' periods and timestamps use).
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

pub struct Mesh {
    pub names: Vec<String>,
    /// The regions' redis-servers (all regions but a clustered first one).
    pub redis: Vec<RedisServer>,
    /// Region `a`'s Redis Cluster, when it has one.
    pub cluster: Option<RedisCluster>,
    /// The redis-servers' process ids (read before any is stopped).
    redis_pids: Vec<String>,
    /// Agents per region.
    pub agents: Vec<Vec<Agent>>,
    /// The relays every link to or from a severable region goes through.
    links: Vec<Relay>,
}

impl Mesh {
    /// Regions `a`, `b`, `c`, … with this many agents each.
    pub fn start(agents_per_region: &[usize]) -> Mesh {
        Mesh::start_with(agents_per_region, None, &[], None)
    }

    /// Like [`Mesh::start`], the other regions reaching region `r`'s Redis, and
    /// region `r` theirs, through relays that [`Mesh::sever`] cuts; region `r`'s
    /// own agents reach their Redis directly.
    pub fn start_severable(agents_per_region: &[usize], r: usize) -> Mesh {
        Mesh::start_with(agents_per_region, None, &[], Some(r))
    }

    /// Like [`Mesh::start`], every agent waiting up to 250 ms for its store
    /// rather than 3 ms. For tests that count grants exactly: on a loaded
    /// machine a store call can miss 3 ms, and the rule's fail-local bucket then
    /// answers, so the count would measure the machine, not the regions.
    pub fn start_patient(agents_per_region: &[usize]) -> Mesh {
        Mesh::start_with(
            agents_per_region,
            None,
            &["--store-deadline-ms", "250"],
            None,
        )
    }

    /// Like [`Mesh::start`], region `a` on a Redis Cluster of `masters` nodes.
    pub fn start_clustered(agents_per_region: &[usize], masters: usize) -> Mesh {
        let cluster = Some(RedisCluster::start(masters));
        Mesh::start_with(agents_per_region, cluster, &[], None)
    }

    fn start_with(
        agents_per_region: &[usize],
        cluster: Option<RedisCluster>,
        args: &[&str],
        severable: Option<usize>,
    ) -> Mesh {
        let names: Vec<String> = (0..agents_per_region.len())
            .map(|i| char::from(b'a' + i as u8).to_string())
            .collect();
        let singles = names.len() - usize::from(cluster.is_some());
        let redis: Vec<RedisServer> = (0..singles).map(|_| RedisServer::start()).collect();
        let urls: Vec<String> = cluster
            .iter()
            .map(RedisCluster::url)
            .chain(redis.iter().map(RedisServer::url))
            .collect();
        // One relay in front of each Redis a link to or from the severable
        // region reaches: region s's for the others, the others' for s.
        assert!(
            cluster.is_none() || severable.is_none(),
            "relays front single servers"
        );
        let links: Vec<Relay> = match severable {
            Some(_) => redis.iter().map(|r| Relay::start(r.port())).collect(),
            None => Vec::new(),
        };
        let peer_url = |from: usize, to: usize| match severable {
            Some(s) if from == s || to == s => links[to].url(),
            _ => urls[to].clone(),
        };
        let agents = agents_per_region
            .iter()
            .enumerate()
            .map(|(r, n)| {
                let peers: Vec<(String, String)> = (0..names.len())
                    .filter(|p| *p != r)
                    .map(|p| (names[p].clone(), peer_url(r, p)))
                    .collect();
                (0..*n)
                    .map(|_| start_agent(&urls[r], &names[r], &peers, args))
                    .collect()
            })
            .collect();
        let redis_pids = redis.iter().map(pid).collect();
        Mesh {
            names,
            redis,
            cluster,
            redis_pids,
            agents,
            links,
        }
    }

    /// Cuts every link to and from the severable region.
    pub fn sever(&self) {
        self.links.iter().for_each(Relay::cut);
    }

    /// Restores the links [`Mesh::sever`] cut.
    pub fn heal(&self) {
        self.links.iter().for_each(Relay::restore);
    }

    /// The first agent of region `r`.
    pub fn agent(&self, r: usize) -> &Agent {
        &self.agents[r][0]
    }

    /// Region `r`'s share of `key` as its first agent has it cached.
    pub fn share(&self, r: usize, key: &str) -> Option<f64> {
        share_of(&self.agent(r).metrics(), key)
    }

    /// Waits until region `r` holds at least `share` of `key`.
    pub fn wait_share(&self, r: usize, key: &str, share: f64, timeout: Duration) {
        let what = format!("region {} to hold {share} of {key}", self.names[r]);
        let got = wait_for(timeout, &what, || match self.share(r, key) {
            Some(s) if s >= share => Probe::Ready(()),
            _ => Probe::Pending,
        });
        if let Err(why) = got {
            panic!("{why}; shares {:?}", self.shares(key));
        }
    }

    /// Every region's share of `key` (first agents).
    pub fn shares(&self, key: &str) -> Vec<Option<f64>> {
        (0..self.names.len()).map(|r| self.share(r, key)).collect()
    }

    /// Sends SIGSTOP or SIGCONT to region `r`'s redis-server (a mesh without a
    /// cluster).
    pub fn signal_redis(&self, r: usize, signal: &str) {
        let pid = &self.redis_pids[r];
        let ok = Command::new("kill").args([signal, pid]).status().unwrap();
        assert!(ok.success(), "kill {signal} {pid}");
    }
}

fn pid(redis: &RedisServer) -> String {
    let info = redis.cmd(&["INFO", "server"]).text().unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .to_string()
}

/// An agent of `region` on the Redis at `url`, told of its `peers` (name, URL).
fn start_agent(url: &str, region: &str, peers: &[(String, String)], args: &[&str]) -> Agent {
    // The agent's own 3 ms store deadline unless a test passes one: a
    // stalled region's store is what some of these tests stop.
    let mut opts = AgentOptions::new(RULES)
        .shipped_store_deadline()
        .store(url)
        .region(region)
        .arg("--log")
        .arg("info,meshlimit_agent=debug");
    for arg in args {
        opts = opts.arg(*arg);
    }
    if let Ok(bin) = std::env::var("MESHLIMIT_AGENT_BIN") {
        opts = opts.binary(bin);
    }
    for (name, url) in peers {
        opts = opts.arg("--peer-region").arg(format!("{name}={url}"));
    }
    Agent::start_with(opts)
}

/// `meshlimit_region_share` of `key` in a metrics text.
pub fn share_of(metrics: &str, key: &str) -> Option<f64> {
    let rule = key.split('|').next().unwrap();
    // Labels name the key by its id, never in clear.
    let label = meshlimit_tests::exchange_key(key);
    sample(
        metrics,
        "meshlimit_region_share",
        &[("rule", rule), ("key", &label)],
    )
}

/// Waits until region `r`'s first agent holds `share` of `key`; returns when the
/// agent put that share in force (its own timestamp, Unix seconds).
pub fn adopted_at(mesh: &Mesh, r: usize, key: &str, share: f64, timeout: Duration) -> f64 {
    let what = format!("at least {share}");
    in_force_at(mesh, r, key, &what, |s| s >= share, timeout)
}

/// Waits until region `r`'s first agent holds a share of `key` that is `what`
/// (`want` says when); returns when the agent put it in force (Unix seconds).
pub fn in_force_at(
    mesh: &Mesh,
    r: usize,
    key: &str,
    what: &str,
    want: impl Fn(f64) -> bool,
    timeout: Duration,
) -> f64 {
    let started = Instant::now();
    loop {
        let m = mesh.agent(r).metrics();
        if share_of(&m, key).is_some_and(&want) {
            let name = "meshlimit_region_shares_refreshed_timestamp_seconds";
            return sample(&m, name, &[]).unwrap();
        }
        assert!(
            started.elapsed() < timeout,
            "region {} never held {what} of {key}: {:?}",
            mesh.names[r],
            mesh.shares(key)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asks `agent` for one lease of `cost` on `key`; the answer's JSON.
pub fn lease(agent: &Agent, key: &str, cost: u32) -> Option<serde_json::Value> {
    lease_url(&agent.base_url(), key, cost)
}

/// [`lease`] from the agent at `base` (`http://127.0.0.1:PORT`).
pub fn lease_url(base: &str, key: &str, cost: u32) -> Option<serde_json::Value> {
    let rule = key.split('|').next().unwrap();
    let body = serde_json::json!({
        "v": 1,
        "items": [{ "rule": rule, "key": key, "cost": cost }],
    })
    .to_string();
    let auth = meshlimit_tests::agent_auth();
    let resp = try_request(
        "POST",
        &format!("{base}/v1/lease"),
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        Some(body.as_bytes()),
    )
    .ok()?;
    (resp.status == 200).then(|| resp.json()["items"][0].clone())
}
