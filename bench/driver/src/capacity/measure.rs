//! Every measurement of a run, in order: the lease load's rounds and the
//! buckets' memory on one redis-server, then the region exchange's message
//! sizes and the filter's memory.

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use meshlimit_core::secret::KeyIds;
use meshlimit_core::{Algorithm, DescriptorKey};
use meshlimit_store::redis::keys::region::exchange_key;
use meshlimit_store::redis::RedisStore;
use meshlimit_tests::{RedisServer, Resp};

use crate::info::Snapshot;
use crate::load::{self, Sent, Shape, SHAPES};
use crate::{CapError, Options};

/// One shape's run: Redis's accounting over it (less one `INFO`'s own bytes)
/// and what the client sent.
pub struct LoadRun {
    pub shape: Shape,
    pub redis: Snapshot,
    pub sent: Sent,
}

/// One memory measurement: `used_memory` and `DBSIZE` after creating the
/// buckets, less before.
pub struct MemoryRun {
    pub algorithm: Algorithm,
    pub bytes: i64,
    pub keys: i64,
    pub sent: Sent,
}

/// The encoded bytes of one demand flush with 1 and with 1,000 keys.
pub struct Region {
    pub one: usize,
    pub thousand: usize,
    pub per_second: f64,
}

pub struct Measured {
    pub loads: Vec<LoadRun>,
    pub memory: Vec<MemoryRun>,
    pub region: Region,
    /// `meshlimit-wasm-cost --memory`'s answer.
    pub filter: serde_json::Value,
}

pub fn all(opts: &Options) -> Result<Measured, CapError> {
    let redis = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (store, pipelines) = load::store(&redis.addr())?;
    // Connects and loads the lease script, outside any measurement.
    let warm = rt.block_on(load::drive(&store, &pipelines, SHAPES[0], 0, 0.5));
    if warm.items == 0 || warm.failed == warm.items {
        return Err(CapError::Redis(
            "the warm-up's lease calls all failed".into(),
        ));
    }
    let lab = Lab {
        redis,
        rt,
        store,
        pipelines,
    };
    Ok(Measured {
        loads: lab.load_rounds(opts)?,
        memory: lab.memory_rounds(opts)?,
        region: region(),
        filter: filter_memory()?,
    })
}

/// The redis-server, the runtime and the store client the rounds share.
struct Lab {
    redis: RedisServer,
    rt: tokio::runtime::Runtime,
    store: Arc<RedisStore>,
    pipelines: Arc<AtomicU64>,
}

impl Lab {
    /// Every shape for `opts.seconds`, interleaved, `opts.rounds` times.
    fn load_rounds(&self, opts: &Options) -> Result<Vec<LoadRun>, CapError> {
        let overhead = snapshot(&self.redis)?.delta(&snapshot(&self.redis)?);
        let mut loads = Vec::new();
        for round in 1..=opts.rounds {
            for shape in SHAPES {
                let before = snapshot(&self.redis)?;
                let run = load::drive(&self.store, &self.pipelines, shape, round, opts.seconds);
                let sent = self.rt.block_on(run);
                let mut redis = before.delta(&snapshot(&self.redis)?);
                redis.net_in = redis.net_in.saturating_sub(overhead.net_in);
                redis.net_out = redis.net_out.saturating_sub(overhead.net_out);
                eprintln!(
                    "capacity: round {round} {}: {} items, {} script calls, {:.2} Redis CPU s",
                    shape.name, sent.items, redis.script_calls, redis.cpu_s
                );
                loads.push(LoadRun { shape, redis, sent });
            }
        }
        Ok(loads)
    }

    /// `opts.buckets` new buckets of each algorithm on an emptied server,
    /// `opts.rounds` times.
    fn memory_rounds(&self, opts: &Options) -> Result<Vec<MemoryRun>, CapError> {
        let redis = &self.redis;
        let mut memory = Vec::new();
        for round in 1..=opts.rounds {
            for algorithm in [Algorithm::TokenBucket, Algorithm::SlidingWindow] {
                command(redis, &["FLUSHALL", "SYNC"])?;
                let (before, keys_before) = (snapshot(redis)?, dbsize(redis)?);
                let create =
                    load::create(&self.store, load::hourly(algorithm), round, opts.buckets);
                let sent = self.rt.block_on(create);
                let (after, keys_after) = (snapshot(redis)?, dbsize(redis)?);
                let run = MemoryRun {
                    algorithm,
                    bytes: after.used_memory as i64 - before.used_memory as i64,
                    keys: keys_after - keys_before,
                    sent,
                };
                eprintln!(
                    "capacity: round {round} {}: {} buckets, {} bytes",
                    algorithm.name(),
                    run.keys,
                    run.bytes
                );
                memory.push(run);
            }
        }
        Ok(memory)
    }
}

fn command(redis: &RedisServer, args: &[&str]) -> Result<Resp, CapError> {
    match redis.cmd(args) {
        Resp::Error(e) => Err(CapError::Redis(format!("{args:?}: {e}"))),
        answer => Ok(answer),
    }
}

fn snapshot(redis: &RedisServer) -> Result<Snapshot, CapError> {
    let info = command(redis, &["INFO", "all"])?
        .text()
        .ok_or_else(|| CapError::Redis("INFO answered no text".into()))?;
    Ok(Snapshot::parse(&info)?)
}

fn dbsize(redis: &RedisServer) -> Result<i64, CapError> {
    match command(redis, &["DBSIZE"])? {
        Resp::Int(n) => Ok(n),
        other => Err(CapError::Redis(format!("DBSIZE answered {other:?}"))),
    }
}

/// One flush's bytes with 1 and with 1,000 keys of a typical rule, named as
/// the agent names them (the rule and the key's keyed id).
fn region() -> Region {
    let ids = KeyIds::placeholder();
    let demand = |n: u64| -> HashMap<String, u64> {
        (0..n)
            .map(|i| {
                let key = DescriptorKey::new(load::RULE, [format!("user-{i}")]);
                (exchange_key(&ids, &key), 1 + i % 500)
            })
            .collect()
    };
    // A period as the agent numbers them: seconds since the Unix epoch.
    let period = 1_780_000_000;
    Region {
        one: meshlimit_agent::regions::flush_bytes(period, demand(1)),
        thousand: meshlimit_agent::regions::flush_bytes(period, demand(1_000)),
        per_second: meshlimit_agent::regions::flushes_per_second(),
    }
}

/// Runs `meshlimit-wasm-cost --memory` beside this binary on the filter
/// module `make build` left.
fn filter_memory() -> Result<serde_json::Value, CapError> {
    let exe = std::env::current_exe()?;
    let bin = exe.with_file_name("meshlimit-wasm-cost");
    let module = meshlimit_tests::filter_wasm();
    let out = Command::new(&bin)
        .arg("--memory")
        .arg("--filter")
        .arg(&module)
        .current_dir(meshlimit_tests::repo_root())
        .output()
        .map_err(|e| CapError::WasmCost(format!("{}: {e}", bin.display())))?;
    if !out.status.success() {
        return Err(CapError::WasmCost(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}
