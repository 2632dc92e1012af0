//! The machine line and provenance of a run: CPU model and count, kernel, Envoy
//! version, git commit, date.

use std::process::Command;

use crate::procs::output;

pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub kernel: String,
    pub memory_gib: f64,
    pub envoy: String,
    pub commit: String,
    pub date: String,
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages when the run started: the
    /// machine is shared, and a load near or above its CPU count means noisy figures.
    pub load_start: String,
}

/// The 1, 5 and 15 minute load averages, now.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("MemTotal:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
        let run = |program: &str, args: &[&str]| {
            output(
                Command::new(program)
                    .args(args)
                    .current_dir(meshlimit_tests::repo_root()),
            )
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
        };
        let envoy_bin = meshlimit_tests::envoy_bin();
        let envoy = run(&envoy_bin.to_string_lossy(), &["--version"]);
        // `<path> version: <sha>/1.40.0/Clean/RELEASE/BoringSSL`
        let envoy = envoy
            .split_once("version:")
            .and_then(|(_, v)| v.trim().split('/').nth(1))
            .unwrap_or("unknown")
            .to_string();
        let dirty = !run("git", &["status", "--porcelain"]).is_empty();
        let commit = format!(
            "{}{}",
            run("git", &["rev-parse", "--short=12", "HEAD"]),
            if dirty {
                " (with uncommitted changes)"
            } else {
                ""
            }
        );
        Machine {
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: run("uname", &["-r"]),
            memory_gib,
            envoy,
            commit,
            date: run("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            load_start: load_average(),
        }
    }

    pub fn line(&self) -> String {
        format!(
            "{} CPUs ({}), {:.0} GiB, Linux {}, Envoy {}",
            self.cpus, self.cpu_model, self.memory_gib, self.kernel, self.envoy
        )
    }
}
