//! The criterion benchmarks of `bench/core-bench`, run through cargo (already
//! built by `make bench`), read back from criterion's `estimates.json` files.

use std::path::Path;
use std::process::Command;

use crate::error::{BenchError, Context, Result};
use crate::procs::output;
use crate::records::Micro;

/// The benchmarks the report shows, as criterion names them (`group/bench`).
pub const NAMES: [&str; 16] = [
    "core/bucket_take",
    "core/key_fingerprint",
    "core/key_id",
    "keyed/meshlimit",
    "keyed/governor",
    "single/meshlimit",
    "single/governor",
    "clock/quanta",
    "clock/std_instant",
    "rules/applicable/10",
    "rules/applicable/1000",
    "rules/applicable/20000",
    "rules/applicable_none/10",
    "rules/applicable_none/1000",
    "rules/applicable_none/20000",
    "rules_compile/20000",
];

/// The command, pinned to `cpu`; `quick` is criterion's short mode (smoke runs).
pub fn command(cpu: &str, quick: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "taskset",
        "-c",
        cpu,
        "cargo",
        "bench",
        "-p",
        "meshlimit-core-bench",
        "--bench",
        "decision",
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if quick {
        args.push("--quick".into());
    }
    args
}

pub fn run(cpu: &str, quick: bool) -> Result<Vec<Micro>> {
    let args = command(cpu, quick);
    output(
        Command::new(&args[0])
            .args(&args[1..])
            .current_dir(meshlimit_tests::repo_root()),
    )?;
    let dir = meshlimit_tests::target_dir().join("criterion");
    NAMES.iter().map(|name| read(&dir, name)).collect()
}

fn read(dir: &Path, name: &str) -> Result<Micro> {
    let path = dir.join(name).join("new/estimates.json");
    let text = std::fs::read_to_string(&path).context(path.display())?;
    let v: serde_json::Value = serde_json::from_str(&text).context(path.display())?;
    let f = |p: &str| v.pointer(p).and_then(serde_json::Value::as_f64);
    match (
        f("/median/point_estimate"),
        f("/median/confidence_interval/lower_bound"),
        f("/median/confidence_interval/upper_bound"),
    ) {
        (Some(median_ns), Some(lower_ns), Some(upper_ns)) => Ok(Micro {
            name: name.to_string(),
            median_ns,
            lower_ns,
            upper_ns,
        }),
        _ => Err(BenchError::new(format!(
            "{}: no median estimate",
            path.display()
        ))),
    }
}
