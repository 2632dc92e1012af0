//! Real redis-server processes: a single server, or a Redis Cluster of several.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::Proc;
use crate::resp::{command, Resp};
use crate::wait::{wait_for, Probe};
use crate::{free_port, temp_dir};

const START_TIMEOUT: Duration = Duration::from_secs(15);
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);
/// A redis-cli run: a rebalance under load moves thousands of slots.
const REDIS_CLI_TIMEOUT: Duration = Duration::from_secs(300);
const SLOTS: usize = 16_384;

/// One redis-server on 127.0.0.1 with no persistence, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    extra_args: Vec<String>,
    proc: Option<Proc>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// With more redis-server arguments, e.g. `&["--maxmemory", "1mb"]`.
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            proc: None,
            dir: temp_dir("redis"),
        };
        server.launch();
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The agent's `--store` value for this server: `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// Runs one command; panics if the server does not answer.
    pub fn cmd(&self, args: &[&str]) -> Resp {
        command(self.port, args).unwrap_or_else(|e| panic!("redis {}: {args:?}: {e}", self.port))
    }

    /// The server's process id (for SIGSTOP and SIGCONT).
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// Kills the server (SIGKILL): it vanishes as in a crash.
    pub fn kill(&mut self) {
        if let Some(proc) = self.proc.as_mut() {
            proc.kill();
        }
    }

    /// Starts it again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        self.kill();
        self.proc = None;
        self.launch();
    }

    pub fn log(&self) -> String {
        self.proc.as_ref().map(Proc::stdout).unwrap_or_default()
    }

    fn launch(&mut self) {
        let extra: Vec<&str> = self.extra_args.iter().map(String::as_str).collect();
        self.proc = Some(spawn_redis("redis", self.port, &extra, self.dir.path()));
    }
}

/// A Redis Cluster of `masters` redis-server processes (no replicas) on
/// 127.0.0.1, every slot assigned and `cluster_state:ok` on every node before
/// `start` returns. Killed on drop.
///
/// `cluster-require-full-coverage no`: when a test kills one master, the other
/// shards keep serving, which is what the agent's per-shard failure handling is
/// tested against.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
    /// How many nodes the cluster was created with (nodes `0..founders`);
    /// [`RedisCluster::add_primary`] adds more.
    founders: usize,
    dir: tempfile::TempDir,
}

#[derive(Debug)]
struct ClusterNode {
    port: u16,
    bus_port: u16,
    node_timeout_ms: u64,
    proc: Proc,
}

impl RedisCluster {
    pub fn start(masters: usize) -> RedisCluster {
        RedisCluster::start_with(masters, 0, 5_000)
    }

    /// `masters` primaries with `replicas` replicas each (nodes `0..masters`
    /// start as the primaries), and `cluster-node-timeout` in milliseconds: a
    /// primary unreachable that long is failed and a replica promoted.
    pub fn start_with(masters: usize, replicas: usize, node_timeout_ms: u64) -> RedisCluster {
        assert!(masters >= 1, "a cluster needs at least one master");
        let dir = temp_dir("redis-cluster");
        let nodes = (0..masters * (1 + replicas))
            .map(|i| start_cluster_node(i, dir.path(), node_timeout_ms))
            .collect();
        let cluster = RedisCluster {
            founders: masters * (1 + replicas),
            nodes,
            dir,
        };
        if masters >= 3 {
            cluster.create_with_redis_cli(replicas);
        } else {
            assert_eq!(replicas, 0, "replicas need at least 3 masters");
            // redis-cli refuses clusters of fewer than 3 masters: same result by hand.
            cluster.create_by_hand();
        }
        cluster.wait_ok();
        cluster
    }

    /// How many nodes the cluster was created with: nodes `0..founders()`,
    /// each primary among them with its replicas; a node
    /// [`RedisCluster::add_primary`] added has none.
    pub fn founders(&self) -> usize {
        self.founders
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `127.0.0.1:<port>` of every node.
    pub fn addrs(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// The agent's `--store` value: `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`.
    pub fn url(&self) -> String {
        format!("redis+cluster://{}", self.addrs().join(","))
    }

    /// Runs one command on node `node`; panics if it does not answer.
    pub fn cmd(&self, node: usize, args: &[&str]) -> Resp {
        let port = self.nodes[node].port;
        command(port, args).unwrap_or_else(|e| panic!("redis {port}: {args:?}: {e}"))
    }

    /// `CLUSTER INFO` of node `node`.
    pub fn cluster_info(&self, node: usize) -> String {
        self.cmd(node, &["CLUSTER", "INFO"])
            .text()
            .unwrap_or_default()
    }

    /// Kills node `node` (SIGKILL): its slots become unreachable.
    pub fn kill_node(&mut self, node: usize) {
        self.nodes[node].proc.kill();
    }

    /// The process id of node `node` (for SIGSTOP and SIGCONT).
    pub fn pid(&self, node: usize) -> u32 {
        self.nodes[node].proc.pid()
    }

    /// Starts killed node `node` again on its ports, with its cluster
    /// configuration (`nodes.conf`) but no data: nothing is persisted.
    pub fn restart_node(&mut self, node: usize) {
        self.nodes[node].proc.kill();
        let n = &self.nodes[node];
        let dir = self.dir.path().join(format!("node-{node}"));
        let _ = std::fs::remove_file(dir.join("dump.rdb"));
        let proc = spawn_redis(
            &format!("redis-{node}"),
            n.port,
            &cluster_args(n.bus_port, n.node_timeout_ms)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            &dir,
        );
        self.nodes[node].proc = proc;
    }

    /// Index of the node on `port`.
    pub fn index_of(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port == port)
    }

    /// The port of the primary serving `slot`, as node `asked` sees it
    /// (`CLUSTER SHARDS`/`NODES` reading kept simple: `CLUSTER NODES`).
    pub fn primary_of_slot(&self, asked: usize, slot: u16) -> Option<u16> {
        let text = command(self.nodes[asked].port, &["CLUSTER", "NODES"])
            .ok()?
            .text()?;
        text.lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = f.get(2)?;
            if !flags.contains("master") || flags.contains("fail") {
                return None;
            }
            let port: u16 = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
            let owns = f.iter().skip(8).any(|r| match r.split_once('-') {
                Some((a, b)) => a
                    .parse::<u16>()
                    .ok()
                    .zip(b.parse::<u16>().ok())
                    .is_some_and(|(a, b)| (a..=b).contains(&slot)),
                None => r.parse::<u16>().ok() == Some(slot),
            });
            owns.then_some(port)
        })
    }

    /// `CLUSTER NODES` flags of node `node` as `asked` sees it (`master`,
    /// `slave`, `fail?`, `fail`, …).
    pub fn flags_of(&self, asked: usize, node: usize) -> String {
        let port = format!(":{}@", self.nodes[node].port);
        command(self.nodes[asked].port, &["CLUSTER", "NODES"])
            .ok()
            .and_then(|r| r.text())
            .and_then(|t| {
                t.lines()
                    .find(|l| l.contains(&port))
                    .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
            })
            .unwrap_or_default()
    }

    /// The port of the primary owning `slot` in node `asked`'s `CLUSTER SLOTS`.
    pub fn slot_owner(&self, asked: usize, slot: u16) -> Option<u16> {
        let Resp::Array(Some(rows)) = self.cmd(asked, &["CLUSTER", "SLOTS"]) else {
            return None;
        };
        rows.iter().find_map(|row| {
            let Resp::Array(Some(f)) = row else {
                return None;
            };
            let (Some(Resp::Int(first)), Some(Resp::Int(last)), Some(Resp::Array(Some(owner)))) =
                (f.first(), f.get(1), f.get(2))
            else {
                return None;
            };
            let Some(Resp::Int(port)) = owner.get(1) else {
                return None;
            };
            (*first..=*last)
                .contains(&i64::from(slot))
                .then(|| u16::try_from(*port).ok())
                .flatten()
        })
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        match self.cmd(0, &["CLUSTER", "KEYSLOT", key]) {
            Resp::Int(slot) => u16::try_from(slot).expect("a slot is below 16,384"),
            other => panic!("CLUSTER KEYSLOT {key}: {other:?}"),
        }
    }

    /// Node `node`'s cluster id (`CLUSTER MYID`).
    pub fn node_id(&self, node: usize) -> String {
        self.cmd(node, &["CLUSTER", "MYID"])
            .text()
            .unwrap_or_else(|| panic!("CLUSTER MYID of node {node}"))
    }

    /// Starts moving hash slot `slot` from primary `from` to primary `to`, as
    /// `redis-cli --cluster reshard` does: `to` imports it, then `from`
    /// migrates it. From then on `from` answers ASK for the slot's keys it no
    /// longer holds, and `to` serves them after `ASKING`.
    pub fn start_slot_move(&self, slot: u16, from: usize, to: usize) {
        let slot = slot.to_string();
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let port = |n: usize| self.nodes[n].port;
        expect_ok(
            port(to),
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id],
        );
        expect_ok(
            port(from),
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id],
        );
    }

    /// Moves `keys` of a migrating hash slot from `from` to `to` (`MIGRATE ...
    /// KEYS`); keys `from` does not hold are skipped.
    pub fn migrate_keys(&self, from: usize, to: usize, keys: &[String]) {
        let port = self.nodes[to].port.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().map(String::as_str));
        match self.cmd(from, &args) {
            Resp::Simple(s) if s == "OK" || s == "NOKEY" => {}
            other => panic!("MIGRATE {keys:?} from node {from} to node {to}: {other:?}"),
        }
    }

    /// Ends a move begun by [`RedisCluster::start_slot_move`]: the slot's keys
    /// left on `from` go to `to`, and every primary, `to` first, then `from`,
    /// records `to` as the slot's owner (`CLUSTER SETSLOT <slot> NODE`).
    pub fn finish_slot_move(&self, slot: u16, from: usize, to: usize) {
        let slot_arg = slot.to_string();
        loop {
            let keys = match self.cmd(from, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, "100"]) {
                Resp::Array(Some(keys)) => keys.iter().filter_map(Resp::text).collect::<Vec<_>>(),
                other => panic!("CLUSTER GETKEYSINSLOT {slot}: {other:?}"),
            };
            if keys.is_empty() {
                break;
            }
            self.migrate_keys(from, to, &keys);
        }
        let to_id = self.node_id(to);
        let others = (0..self.nodes.len()).filter(|n| *n != to && *n != from);
        for n in [to, from].into_iter().chain(others) {
            if self.flags_of(n, n).contains("master") {
                expect_ok(
                    self.nodes[n].port,
                    &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id],
                );
            }
        }
    }

    fn create_with_redis_cli(&self, replicas: usize) {
        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        args.extend(self.addrs());
        args.extend(["--cluster-replicas".into(), replicas.to_string()]);
        args.push("--cluster-yes".into());
        self.redis_cli(&args);
    }

    /// Adds an empty primary (`redis-cli --cluster add-node`) and moves its
    /// share of the slots to it, keys included (`--cluster rebalance
    /// --cluster-use-empty-masters`): scaling out as an operator does it.
    /// Answers the new node's index.
    pub fn add_primary(&mut self) -> usize {
        let index = self.nodes.len();
        let node = start_cluster_node(index, self.dir.path(), self.nodes[0].node_timeout_ms);
        let new = format!("127.0.0.1:{}", node.port);
        self.nodes.push(node);
        let seed = self.a_primary();
        self.redis_cli(&["--cluster", "add-node", &new, &seed].map(String::from));
        // rebalance refuses a cluster whose nodes do not agree yet.
        self.wait_ok();
        let seed = self.a_primary();
        self.redis_cli(
            &[
                "--cluster",
                "rebalance",
                &seed,
                "--cluster-use-empty-masters",
            ]
            .map(String::from),
        );
        index
    }

    /// Moves every slot of the primary added last to the others
    /// (`--cluster rebalance --cluster-weight <id>=0`), then takes it out of
    /// the cluster (`--cluster del-node`, which makes every other node
    /// forget it and shuts it down): scaling in.
    pub fn remove_last_primary(&mut self) {
        let index = self.nodes.len() - 1;
        let id = self.node_id(index);
        let seed = format!("127.0.0.1:{}", self.nodes[index].port);
        let weight = format!("{id}=0");
        self.redis_cli(
            &["--cluster", "rebalance", &seed, "--cluster-weight", &weight].map(String::from),
        );
        let other = (0..index)
            .find(|n| self.flags_of(*n, *n).contains("master"))
            .expect("another primary");
        let seed = format!("127.0.0.1:{}", self.nodes[other].port);
        self.redis_cli(&["--cluster", "del-node", &seed, &id].map(String::from));
        let mut node = self.nodes.pop().expect("the node added last");
        node.proc.kill();
        self.wait_ok();
    }

    /// `127.0.0.1:<port>` of a node that is a primary now.
    fn a_primary(&self) -> String {
        let n = (0..self.nodes.len())
            .find(|n| self.flags_of(*n, *n).contains("master"))
            .expect("a primary");
        format!("127.0.0.1:{}", self.nodes[n].port)
    }

    /// Runs `redis-cli` with `args` to its end; panics with its output if it
    /// fails.
    fn redis_cli(&self, args: &[String]) {
        let mut cmd = Command::new("redis-cli");
        cmd.args(args);
        let what = format!("redis-cli {}", args.join(" "));
        let mut proc = Proc::spawn("redis-cli", cmd, self.dir.path());
        let done = wait_for(REDIS_CLI_TIMEOUT, &what, || match proc.exit_status() {
            Some(status) => Probe::Ready(status),
            None => Probe::Pending,
        });
        match done {
            Ok(status) if status.success() => {}
            Ok(status) => panic!(
                "{what} failed ({status}):\n{}\n{}",
                proc.stdout_tail(30),
                proc.stderr_tail(30)
            ),
            Err(why) => panic!("{why}:\n{}", proc.stdout_tail(30)),
        }
    }

    fn create_by_hand(&self) {
        let n = self.nodes.len();
        for (i, node) in self.nodes.iter().enumerate() {
            let first = (SLOTS * i / n).to_string();
            let last = (SLOTS * (i + 1) / n - 1).to_string();
            expect_ok(node.port, &["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
        }
        let first = self.nodes[0].port;
        for node in &self.nodes[1..] {
            let (port, bus) = (node.port.to_string(), node.bus_port.to_string());
            expect_ok(first, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus]);
        }
    }

    fn wait_ok(&self) {
        let n = self.nodes.len();
        let want_known = format!("cluster_known_nodes:{n}");
        let want_slots = format!("cluster_slots_assigned:{SLOTS}");
        for node in &self.nodes {
            let what = format!("cluster_state:ok on 127.0.0.1:{}", node.port);
            let result = wait_for(CLUSTER_TIMEOUT, &what, || {
                let info = match command(node.port, &["CLUSTER", "INFO"]) {
                    Ok(reply) => reply.text().unwrap_or_default(),
                    Err(_) => return Probe::Pending,
                };
                let has = |line: &str| info.lines().any(|l| l.trim() == line);
                if has("cluster_state:ok") && has(&want_known) && has(&want_slots) {
                    Probe::Ready(())
                } else {
                    Probe::Pending
                }
            });
            if let Err(why) = result {
                let info = command(node.port, &["CLUSTER", "INFO"]);
                panic!("{why}; last CLUSTER INFO: {info:?}");
            }
        }
    }
}

fn cluster_args(bus_port: u16, node_timeout_ms: u64) -> Vec<String> {
    [
        "--cluster-enabled",
        "yes",
        "--cluster-port",
        &bus_port.to_string(),
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        &node_timeout_ms.to_string(),
        "--cluster-require-full-coverage",
        "no",
    ]
    .map(String::from)
    .to_vec()
}

fn start_cluster_node(index: usize, dir: &Path, node_timeout_ms: u64) -> ClusterNode {
    let (port, bus_port) = (free_port(), free_port());
    let node_dir = dir.join(format!("node-{index}"));
    std::fs::create_dir(&node_dir).expect("create the node directory");
    let args = cluster_args(bus_port, node_timeout_ms);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proc = spawn_redis(&format!("redis-{index}"), port, &args, &node_dir);
    ClusterNode {
        port,
        bus_port,
        node_timeout_ms,
        proc,
    }
}

/// Starts redis-server on 127.0.0.1:`port` with its files in `dir`, and waits for
/// it to answer PING.
fn spawn_redis(name: &str, port: u16, extra_args: &[&str], dir: &Path) -> Proc {
    let port_arg = port.to_string();
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port_arg])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(["--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args(extra_args)
        .current_dir(dir);
    let mut proc = Proc::spawn(name, cmd, dir);
    let what = format!("redis-server on 127.0.0.1:{port} to answer PING");
    let result = wait_for(START_TIMEOUT, &what, || {
        if proc.exit_status().is_some() {
            return Probe::Failed(format!("exited; log:\n{}", proc.stdout_tail(20)));
        }
        match command(port, &["PING"]) {
            Ok(Resp::Simple(pong)) if pong == "PONG" => Probe::Ready(()),
            _ => Probe::Pending,
        }
    });
    if let Err(why) = result {
        panic!(
            "{why}\n(is redis-server installed? `make tools`)\n{}",
            proc.stderr_tail(10)
        );
    }
    proc
}

fn expect_ok(port: u16, args: &[&str]) {
    match command(port, args) {
        Ok(Resp::Simple(ok)) if ok == "OK" => {}
        other => panic!("redis {port}: {args:?}: {other:?}"),
    }
}
