//! `meshlimit-wasm-cost`: the filter's own Wasm work per request, counted in
//! instructions executed (the wasmi interpreter's fuel: about one a Wasm
//! instruction), beside the floor filter's, on one VM driven as Envoy drives
//! it. Deterministic: a module gives the same count on any machine, so a
//! change to the filter's code is priced exactly, where Envoy's CPU time on a
//! shared 2-core machine moves by more than such a change. What it leaves out
//! is Envoy's side of each host call (it counts them) and how V8's compiled
//! code weighs instructions: a `malloc` is thousands of interpreted
//! instructions and much less in V8, so the count says where the module's
//! work is and whether a change cut it, not how many microseconds that is.
//! `make bench` writes its table to `bench/results/wasm-cost.md`.

mod host;
mod vm;

use std::fmt::Write as _;
use std::process::ExitCode;

use meshlimit_core::secret::SECRET_ENV;
use meshlimit_core::RuleSet;
use wasmi::Error;

use crate::vm::{Agent, Burned, Vm};

/// The modules `make build` and `make bench-build` leave, from the workspace root.
const FILTER: &str = "target/wasm32-wasip1/release/meshlimit_filter.wasm";
const FLOOR: &str = "target/wasm32-wasip1/release/meshlimit_bench_floor.wasm";
/// The benchmark's key header (`bench/driver`'s `KEY_HEADER`).
const KEY_HEADER: &str = "x-bench-key";
/// What the shared-data key of every per-key slot starts with (the filter's
/// `slots::SLOT_PREFIX`).
const SLOT_PREFIX: &str = "meshlimit.slot.";
/// The filter's `slots` when its configuration does not say (`{}` here).
const DEFAULT_SLOTS: usize = 16_384;

const USAGE: &str =
    "usage: meshlimit-wasm-cost [--filter F.wasm] [--floor F.wasm] [--requests N] [--checkpoints] [--memory]

Runs N requests (20,000 by default, after as many to warm up) through each
module and prints a Markdown table of the Wasm instructions per request.
--checkpoints also prints the last hot-key, 429 and new-key request's instructions up to
each host call (in order, `→ name`) and each `cp:<label>` the filter logged at
critical level (add such logs to find where the work is; never commit them).
--memory instead sends the filter one key, then N distinct keys in all, and prints
as JSON its linear memory and its per-key slots' shared-data bytes after each
(`make capacity-inputs` reads it).";

struct Options {
    filter: String,
    floor: String,
    requests: usize,
    checkpoints: bool,
    memory: bool,
}

/// Why the command line was not run (exit status 2): the message says how to
/// write it.
#[derive(Debug, thiserror::Error)]
enum OptionsError {
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("--requests: {0}")]
    Requests(std::num::ParseIntError),
    /// `-h` or `--help`.
    #[error("{USAGE}")]
    Help,
    #[error("unknown argument {0}\n\n{USAGE}")]
    Unknown(String),
}

fn options(args: &[String]) -> Result<Options, OptionsError> {
    let mut o = Options {
        filter: FILTER.into(),
        floor: FLOOR.into(),
        requests: 20_000,
        checkpoints: false,
        memory: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .cloned()
                .ok_or_else(|| OptionsError::MissingValue(arg.clone()))
        };
        match arg.as_str() {
            "--filter" => o.filter = value()?,
            "--floor" => o.floor = value()?,
            "--requests" => o.requests = value()?.parse().map_err(OptionsError::Requests)?,
            "--checkpoints" => o.checkpoints = true,
            "--memory" => o.memory = true,
            "-h" | "--help" => return Err(OptionsError::Help),
            other => return Err(OptionsError::Unknown(other.to_string())),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let result = match opts.memory {
        true => memory(&opts),
        false => run(&opts),
    };
    match result {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("meshlimit-wasm-cost: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The headers of a benchmark request as Envoy hands them to a filter.
fn headers(key: &str) -> Vec<(String, String)> {
    [
        (":authority", "127.0.0.1:10000"),
        (":path", "/"),
        (":method", "GET"),
        (":scheme", "http"),
        ("user-agent", "meshlimit-loadgen"),
        (KEY_HEADER, key),
        ("x-forwarded-proto", "http"),
        ("x-request-id", "2b5e8c1a-4f0e-4a51-9d0c-7c6a1f3e9b21"),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect()
}

/// One module's requests.
struct Row {
    label: &'static str,
    burned: Vec<Burned>,
    /// Host calls over all the measured requests, by name.
    calls: Vec<(String, u64)>,
}

/// meshlimit's filter as `make bench` runs its hot key ((c)): one rule keyed
/// on the key header, a limit far above the rate, so the key's lease decides;
/// with `deny`, an agent that denies every key for a minute, so the key's
/// cached denial decides.
fn meshlimit(filter: &[u8], deny: bool) -> Result<Vm, Error> {
    let rules = serde_json::json!({"version": 1, "rules": [
        {"name": "bench-hot", "key": [{"header": KEY_HEADER}],
         "limit": {"requests": 10_000_000, "per": "1s"}},
    ]});
    let rules = serde_json::from_value(rules).map_err(|e| Error::new(e.to_string()))?;
    let rules = RuleSet::compile(&rules).map_err(|e| Error::new(e.to_string()))?;
    let env = vec![(
        SECRET_ENV.to_string(),
        "a deployment secret of at least thirty-two bytes".to_string(),
    )];
    let agent = Agent {
        rules: Some(rules),
        grant: 1_000_000,
        ttl_ms: 60_000,
        deny,
    };
    Vm::start(filter, "{}", env, agent)
}

/// The filter's memory for per-key state, measured on the module as built: its
/// linear memory and its slots' shared-data entries (key and value bytes)
/// after one key and after `o.requests` distinct keys, each a new key (one
/// agent call, its grant kept in the key's slot), as one JSON object.
fn memory(o: &Options) -> Result<String, Error> {
    let filter = std::fs::read(&o.filter)
        .map_err(|e| Error::new(format!("{}: {e} (make build)", o.filter)))?;
    let mut vm = meshlimit(&filter, false)?;
    let one = memory_after(&mut vm, 0, 1)?;
    let many = memory_after(&mut vm, 1, o.requests.max(2))?;
    if let Some(w) = vm.warnings().first() {
        return Err(Error::new(format!("the module warned: {w}")));
    }
    let out = serde_json::json!({"slots": DEFAULT_SLOTS, "one_key": one, "many_keys": many});
    Ok(format!("{out}\n"))
}

/// Sends keys `from..to` (each admitted), then reads the memory.
fn memory_after(vm: &mut Vm, from: usize, to: usize) -> Result<serde_json::Value, Error> {
    for i in from..to {
        let fresh = headers(&format!("key-{i}"));
        let fresh: Vec<(&str, &str)> = fresh
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        vm.advance(100_000);
        if i % 10_000 == 0 {
            vm.tick()?;
        }
        if let Some(status) = vm.request(&fresh)?.replied {
            return Err(Error::new(format!("key {i} got {status}, not admitted")));
        }
    }
    let (slots_used, slot_bytes) = vm.shared_bytes(SLOT_PREFIX);
    let (_, shared_bytes) = vm.shared_bytes("");
    Ok(serde_json::json!({
        "keys": to,
        "linear_memory": vm.linear_memory()?,
        "slots_used": slots_used,
        "slot_bytes": slot_bytes,
        "other_shared_bytes": shared_bytes - slot_bytes,
    }))
}

/// What a scenario sends and what each measured request must get.
#[derive(Debug, Clone, Copy)]
struct Traffic {
    /// A new key on every request (each a miss: one agent call), else one key.
    new_keys: bool,
    /// The local reply every request gets (`None`: admitted).
    answer: Option<i32>,
}

const HOT: Traffic = Traffic {
    new_keys: false,
    answer: None,
};

fn run(o: &Options) -> Result<String, Error> {
    let read = |p: &str| {
        std::fs::read(p).map_err(|e| Error::new(format!("{p}: {e} (make build bench-build)")))
    };
    let (filter, floor) = (read(&o.filter)?, read(&o.floor)?);
    let agentless = || Agent {
        rules: None,
        grant: 0,
        ttl_ms: 0,
        deny: false,
    };
    let n = o.requests;
    let mut rows = Vec::new();
    let mut empty = Vm::start(&floor, r#"{"mode":"empty"}"#, vec![], agentless())?;
    rows.push(measure("empty Wasm filter", &mut empty, n, HOT)?);
    let mut base = Vm::start(&floor, r#"{"mode":"floor"}"#, vec![], agentless())?;
    rows.push(measure(
        "floor: one header, one shared-data read and write",
        &mut base,
        n,
        HOT,
    )?);
    let mut vm = meshlimit(&filter, false)?;
    rows.push(measure(
        "meshlimit, hot key decided by its lease",
        &mut vm,
        n,
        HOT,
    )?);
    let mut checkpoints = vec![("hot-key", vm.checkpoints())];
    let mut denied = meshlimit(&filter, true)?;
    let limited = Traffic {
        new_keys: false,
        answer: Some(429),
    };
    rows.push(measure(
        "meshlimit, hot key over its limit: 429 from its cached denial",
        &mut denied,
        n,
        limited,
    )?);
    checkpoints.push(("429", denied.checkpoints()));
    let mut cold = meshlimit(&filter, false)?;
    let new_keys = Traffic {
        new_keys: true,
        answer: None,
    };
    rows.push(measure(
        "meshlimit, a new key every request: one agent call each",
        &mut cold,
        n,
        new_keys,
    )?);
    checkpoints.push(("new-key", cold.checkpoints()));
    let mut out = report(&rows);
    if o.checkpoints {
        for (row, marks) in checkpoints {
            let _ = writeln!(out, "\nThe last {row} request, up to each checkpoint:\n");
            for (label, n) in marks {
                let _ = writeln!(out, "- {label}: {n}");
            }
        }
    }
    Ok(out)
}

/// `n` requests at 10,000 a second, after as many to warm up; the root ticks
/// once a simulated second, as Envoy's timer would. Every measured request
/// must get `traffic.answer`.
fn measure(label: &'static str, vm: &mut Vm, n: usize, traffic: Traffic) -> Result<Row, Error> {
    let mut row = Row {
        label,
        burned: Vec::with_capacity(n),
        calls: Vec::new(),
    };
    let hot = headers("hot");
    for i in 0..2 * n {
        let fresh;
        let headers = match traffic.new_keys {
            true => {
                fresh = headers(&format!("key-{i}"));
                &fresh
            }
            false => &hot,
        };
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        vm.advance(100_000);
        if i % 10_000 == 0 {
            vm.tick()?;
        }
        let burned = vm.request(&headers)?;
        if i < n {
            continue;
        }
        if burned.replied != traffic.answer {
            return Err(Error::new(format!(
                "{label}: request {i} got {:?}, not {:?}",
                burned.replied, traffic.answer
            )));
        }
        row.burned.push(burned);
        for (name, count) in vm.tally() {
            match row.calls.iter_mut().find(|(n, _)| n == name) {
                Some((_, c)) => *c += count,
                None => row.calls.push((name.clone(), *count)),
            }
        }
    }
    if let Some(w) = vm.warnings().first() {
        return Err(Error::new(format!("{label}: the module warned: {w}")));
    }
    Ok(row)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn report(rows: &[Row]) -> String {
    let floor = rows
        .get(1)
        .map(|r| median(r.burned.iter().map(Burned::total).collect()));
    let mut out = String::from(
        "# The filter's Wasm work per request, counted\n\n\
Written by `make wasm-cost` (and `make bench`): `meshlimit-wasm-cost` runs each module in the wasmi \
interpreter as one Envoy worker's VM and counts the Wasm instructions it executes (wasmi's fuel) \
per request, after as many requests to warm up. Deterministic: the same module gives the same \
counts on any machine. Envoy's side of each host call is not in the count; the calls are listed. \
An allocation costs meshlimit's filter about 300 instructions (its allocator is talc) and the \
empty and floor filters about 2,000 (the toolchain's dlmalloc). The count shows where a module's \
work is and whether a change cut it, not microseconds (bench/README.md, \"Wasm work, counted\").\n\n\
| filter | Wasm instructions per request (median) | ÷ floor | request headers | response headers | log, done, delete | host calls per request | lease calls per 1,000 requests |\n|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let n = row.burned.len().max(1) as f64;
        let med = |f: fn(&Burned) -> u64| median(row.burned.iter().map(f).collect());
        let host: u64 = row.burned.iter().map(|b| b.host_calls).sum();
        let agent: u64 = row.burned.iter().map(|b| b.agent_calls).sum();
        let total = med(Burned::total);
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {} | {} | {} | {:.1} | {:.2} |",
            row.label,
            total,
            floor.map_or(0.0, |f| total as f64 / f.max(1) as f64),
            med(|b| b.request),
            med(|b| b.response),
            med(|b| b.end),
            host as f64 / n,
            agent as f64 * 1000.0 / n,
        );
    }
    out.push_str("\nHost calls per request:\n\n");
    for row in rows.iter().filter(|r| !r.calls.is_empty()) {
        let n = row.burned.len().max(1) as f64;
        let calls: Vec<String> = row
            .calls
            .iter()
            .filter(|(_, c)| *c as f64 / n >= 0.005)
            .map(|(name, c)| format!("`{name}` {:.2}", *c as f64 / n))
            .collect();
        let _ = writeln!(out, "- {}: {}", row.label, calls.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The modules as `make build` and `make bench-build` left them (the
    /// tests run from the crate's directory).
    fn module(path: &str) -> Vec<u8> {
        let at = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&at).unwrap_or_else(|e| panic!("{at}: {e}: run `make build bench-build`"))
    }

    #[test]
    fn the_hot_key_is_decided_by_its_lease_and_costs_more_than_the_floor() {
        // A thousand requests at 10,000 a second make the key hot at the
        // worker: it takes slices of its lease.
        let n = 1_000;
        let mut vm = meshlimit(&module(FILTER), false).unwrap();
        let row = measure("meshlimit", &mut vm, n, HOT).unwrap();
        // One lease call at most warmed the key; the measured requests were
        // decided in the filter, each setting its one access-log value and
        // its two RateLimit fields.
        assert_eq!(row.burned.iter().map(|b| b.agent_calls).sum::<u64>(), 0);
        let per = |name: &str| {
            row.calls
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, c)| *c) as f64
                / n as f64
        };
        assert_eq!(per("proxy_set_property"), 1.0);
        assert_eq!(per("proxy_add_header_map_value"), 2.0);
        assert_eq!(per("proxy_http_call"), 0.0);
        // The clock read once, with the request's headers: its schedules,
        // the local pass, the slot's write and the decision log's time.
        assert_eq!(per("proxy_get_current_time_nanoseconds"), 1.0);
        // The key's slot is read and written once a slice, not once a
        // request: most requests are decided in the worker's own memory.
        let reads = per("proxy_get_shared_data");
        assert!(reads < 0.2, "{reads} slot reads a request");
        // Six host calls on the median request (each a crossing into Envoy):
        // the headers, the clock, the counter, the access-log value and the
        // two RateLimit fields. One more fails here, not unseen in a noisy
        // benchmark.
        let calls = median(row.burned.iter().map(|b| b.host_calls).collect());
        assert_eq!(calls, 6);
        // The count is deterministic: a second VM burns exactly the same.
        let again = measure(
            "meshlimit",
            &mut meshlimit(&module(FILTER), false).unwrap(),
            n,
            HOT,
        )
        .unwrap();
        assert_eq!(row.burned, again.burned);
        let first = median(row.burned.iter().map(Burned::total).collect());
        // The hot key's own work, held: no allocation for its access-log
        // value, its quota, its rules' checks and results, or its request;
        // its key part copied whole; its protocol read only for an answer.
        assert!(first < 47_000, "{first} instructions a request");
        let mut floor = Vm::start(
            &module(FLOOR),
            r#"{"mode":"floor"}"#,
            vec![],
            Agent {
                rules: None,
                grant: 0,
                ttl_ms: 0,
                deny: false,
            },
        )
        .unwrap();
        let floor = measure("floor", &mut floor, 60, HOT).unwrap();
        assert!(median(floor.burned.iter().map(Burned::total).collect()) < first);
    }

    /// `(func (param i32) (result i32) (local i32) (loop ... (br_if 0
    /// (local.get 0))) (local.get 1))`: a loop of ten instructions (two locals
    /// read, an add, a store, ... a branch), run `n` times.
    const TEN_INSTRUCTION_LOOP: &[u8] = &[
        0, 97, 115, 109, 1, 0, 0, 0, 1, 6, 1, 96, 1, 127, 1, 127, 3, 2, 1, 0, 7, 5, 1, 1, 102, 0,
        0, 10, 29, 1, 27, 1, 1, 127, 3, 64, 32, 1, 32, 0, 106, 33, 1, 32, 0, 65, 1, 107, 33, 0, 32,
        0, 13, 0, 11, 32, 1, 11,
    ];

    #[test]
    fn fuel_is_about_one_a_wasm_instruction() {
        let mut config = wasmi::Config::default();
        config.consume_fuel(true);
        let engine = wasmi::Engine::new(&config);
        let module = wasmi::Module::new(&engine, TEN_INSTRUCTION_LOOP).unwrap();
        let mut store = wasmi::Store::new(&engine, ());
        store.set_fuel(1 << 40).unwrap();
        let instance = wasmi::Linker::new(&engine)
            .instantiate_and_start(&mut store, &module)
            .unwrap();
        let f = instance.get_typed_func::<i32, i32>(&store, "f").unwrap();
        let mut burn = |n| {
            let before = store.get_fuel().unwrap();
            f.call(&mut store, n).unwrap();
            before - store.get_fuel().unwrap()
        };
        burn(1);
        let per_loop = (burn(2_000) - burn(1_000)) as f64 / 1_000.0;
        assert!(
            (9.0..=13.0).contains(&per_loop),
            "{per_loop} fuel a loop of ten"
        );
    }

    #[test]
    fn a_denied_key_is_answered_429_locally_and_new_keys_call_the_agent_each() {
        let mut vm = meshlimit(&module(FILTER), true).unwrap();
        let limited = Traffic {
            new_keys: false,
            answer: Some(429),
        };
        let row = measure("denied", &mut vm, 60, limited).unwrap();
        assert_eq!(row.burned.iter().map(|b| b.agent_calls).sum::<u64>(), 0);
        let mut vm = meshlimit(&module(FILTER), false).unwrap();
        let new_keys = Traffic {
            new_keys: true,
            answer: None,
        };
        let row = measure("new keys", &mut vm, 60, new_keys).unwrap();
        assert!(row.burned.iter().all(|b| b.agent_calls == 1));
        // A new key's own work, held: its answer read as the agent writes
        // it, its slot written from the stack, its one waiter without a set
        // or a list of its own, its one item sent without sizing its
        // strings, its slot read and written once before its call (the miss
        // marks it) and once after (the answer pays the request), the
        // agent's answer date read only once the one its VM saw ages, the
        // clock read by its hostcall, its call's list and the list of the
        // requests its answer decided not allocated, its rules (none with a
        // path) matched without the path index, its call's item naming its
        // rule without a copy and its body written into the VM's buffer,
        // its key part and JSON strings checked without a branch a byte: at
        // most 60,000 (58,957 here).
        let new_key = median(row.burned.iter().map(Burned::total).collect());
        assert!(
            new_key <= 60_000,
            "{new_key} instructions a new key's request"
        );
    }

    #[test]
    fn an_allocation_is_hundreds_of_instructions_in_meshlimit_and_thousands_in_the_floor() {
        let mut vm = meshlimit(&module(FILTER), false).unwrap();
        vm.allocation(24).unwrap();
        let talc = vm.allocation(24).unwrap();
        assert!((100..=600).contains(&talc), "{talc}");
        let agentless = Agent {
            rules: None,
            grant: 0,
            ttl_ms: 0,
            deny: false,
        };
        let mut floor =
            Vm::start(&module(FLOOR), r#"{"mode":"floor"}"#, vec![], agentless).unwrap();
        floor.allocation(24).unwrap();
        let dlmalloc = floor.allocation(24).unwrap();
        assert!((1_000..=3_000).contains(&dlmalloc), "{dlmalloc}");
    }

    #[test]
    fn bad_arguments_are_refused_with_the_usage() {
        let args = |a: &[&str]| options(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(args(&["--nope"])
            .err()
            .unwrap()
            .to_string()
            .contains("usage:"));
        assert!(args(&["--requests", "x"]).is_err());
        assert_eq!(args(&["--requests", "5"]).unwrap().requests, 5);
        assert!(args(&["--memory"]).unwrap().memory);
    }

    #[test]
    fn each_new_key_takes_a_slot_of_its_own_until_the_slots_run_out() {
        let mut vm = meshlimit(&module(FILTER), false).unwrap();
        let one = memory_after(&mut vm, 0, 1).unwrap();
        assert_eq!(one["slots_used"], 1, "{one}");
        let many = memory_after(&mut vm, 1, 200).unwrap();
        // 200 keys in 16,384 slots: a few may share one.
        let used = many["slots_used"].as_u64().unwrap();
        assert!((190..=200).contains(&used), "{many}");
        let per_slot = many["slot_bytes"].as_u64().unwrap() / used;
        assert!(per_slot > SLOT_PREFIX.len() as u64, "{many}");
        assert!(many["linear_memory"].as_u64().unwrap() >= 65_536, "{many}");
    }
}
