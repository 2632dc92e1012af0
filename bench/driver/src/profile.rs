//! `--perf`: samples Envoy's CPU (perf record, cpu-clock: this VM has no hardware
//! counters) during a measured run, and summarises where it went by object
//! (Envoy's own code, the kernel, V8's generated code for the Wasm module,
//! libc) and by symbol. Envoy's binary is stripped, so its own frames only
//! count by object; the kernel's and the split between objects carry the story.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::error::{Context, Result};
use crate::number::fmt_num;
use crate::procs::output;

/// Where one configuration's samples went.
#[derive(Debug, Clone)]
pub struct Profile {
    pub scenario: &'static str,
    /// Share of samples by object, in percent.
    pub objects: Vec<(String, f64)>,
    /// The busiest symbols, in percent.
    pub symbols: Vec<(String, f64)>,
    /// Samples with V8's generated code anywhere on the stack, in percent: the
    /// filter's Wasm code and the hostcalls it makes into Envoy.
    pub in_filter: f64,
    pub samples_file: PathBuf,
    /// Envoy's CPU µs per request during the sampled run, to turn shares into
    /// time per request.
    pub cpu_us_per_request: f64,
}

/// Starts sampling `pid` for `seconds` on `cpu`.
pub fn start(pid: u32, seconds: u32, cpu: &str, path: &Path) -> Result<Child> {
    Command::new("taskset")
        .args([
            "-c",
            cpu,
            "perf",
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "999",
            "-g",
            "-p",
        ])
        .arg(pid.to_string())
        .arg("-o")
        .arg(path)
        .args(["--", "sleep", &seconds.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start perf record")
}

/// Reads a finished recording.
pub fn summarise(scenario: &'static str, path: &Path) -> Result<Profile> {
    let report = |sort: &str| {
        output(
            Command::new("perf")
                .args([
                    "report",
                    "--no-children",
                    "--stdio",
                    "-g",
                    "none",
                    "--sort",
                    sort,
                    "-i",
                ])
                .arg(path),
        )
    };
    Ok(Profile {
        scenario,
        objects: shares(&report("dso")?, 8),
        symbols: shares(&report("dso,sym")?, 12),
        in_filter: in_filter(&output(
            Command::new("perf")
                .args([
                    "report",
                    "--children",
                    "--stdio",
                    "-g",
                    "none",
                    "--sort",
                    "dso",
                    "-i",
                ])
                .arg(path),
        )?),
        samples_file: path.to_path_buf(),
        cpu_us_per_request: 0.0,
    })
}

/// The "children" share of the `[JIT]` object in `perf report --children`:
/// `  14.15%     5.56%  [JIT] tid 123`.
fn in_filter(text: &str) -> f64 {
    text.lines()
        .filter(|l| l.contains("[JIT]"))
        .filter_map(|l| l.trim().split('%').next()?.trim().parse::<f64>().ok())
        .sum()
}

/// `  12.34%  name…` lines, the first `n`.
fn shares(text: &str, n: usize) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let (pct, name) = l.trim().split_once('%')?;
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            let name = if name.starts_with("[JIT]") {
                "[JIT] Wasm code (V8)".to_string()
            } else {
                name
            };
            Some((name, pct.trim().parse().ok()?))
        })
        .take(n)
        .collect()
}

/// The report's section: objects side by side, then each configuration's top
/// symbols.
pub fn render(profiles: &[Profile]) -> String {
    if profiles.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\n## Profile of Envoy's worker (perf, cpu-clock)\n\nShare of samples by object, and that share of \
         Envoy's CPU per request in the sampled run (one more run of each, after the measured rounds):\n\n| object |",
    );
    for p in profiles {
        let _ = write!(
            md,
            " ({}), {} µs/request |",
            p.scenario,
            fmt_num(p.cpu_us_per_request, 1)
        );
    }
    md.push_str("\n|---|");
    md.push_str(&"---|".repeat(profiles.len()));
    md.push('\n');
    let mut names: Vec<String> = Vec::new();
    for p in profiles {
        for (name, _) in &p.objects {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    for name in names {
        let _ = write!(md, "| {name} |");
        for p in profiles {
            let v = p.objects.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
            let cell = v.map_or("—".to_string(), |v| {
                let us = v / 100.0 * p.cpu_us_per_request;
                format!("{}% ({} µs)", fmt_num(v, 1), fmt_num(us, 1))
            });
            let _ = write!(md, " {cell} |");
        }
        md.push('\n');
    }
    md.push_str("| **inside the filter: Wasm frames and the hostcalls they make** |");
    for p in profiles {
        let us = p.in_filter / 100.0 * p.cpu_us_per_request;
        let _ = write!(
            md,
            " **{}% ({} µs)** |",
            fmt_num(p.in_filter, 1),
            fmt_num(us, 1)
        );
    }
    md.push('\n');
    for p in profiles
        .iter()
        .filter(|p| ["c", "e", "f"].contains(&p.scenario))
    {
        let _ = writeln!(
            md,
            "\nTop symbols, ({}) (samples in `{}`):\n",
            p.scenario,
            p.samples_file.display()
        );
        for (name, v) in &p.symbols {
            let _ = writeln!(md, "- {}% {}", fmt_num(*v, 1), name.replace('|', "\\|"));
        }
    }
    md
}
