//! Child processes pinned to a CPU with `taskset`, killed on drop, their output in
//! a log file; CPU time read from `/proc/<pid>/stat`; bounded waits.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{BenchError, Context, Result};

/// A started process, pinned with `taskset -c <cpu>`. `taskset` execs the program,
/// so the pid is the program's own (so is the Envoy wrapper script's, which execs
/// the real binary).
pub struct Pinned {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Pinned {
    /// Starts `program args…` on `cpu`, stdout and stderr to `<dir>/<name>.log`.
    pub fn spawn(
        name: &str,
        cpu: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        dir: &Path,
    ) -> Result<Pinned> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).context(format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new("taskset")
            .arg("-c")
            .arg(cpu)
            .arg(program)
            .args(args)
            .current_dir(meshlimit_tests::repo_root())
            // The deployment secret both the agent and Envoy's filter read.
            .env("MESHLIMIT_SECRET", meshlimit_tests::TEST_SECRET)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context(format!("start {name} ({})", program.display()))?;
        Ok(Pinned {
            name: name.to_string(),
            child,
            log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Err` with the log's tail if the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(BenchError::new(format!(
                "{} exited ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                self.log_tail(20)
            ))),
            Err(e) => Err(BenchError::new(format!("{}: {e}", self.name))),
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// CPU seconds (user + system, all threads) used so far.
    pub fn cpu_seconds(&self) -> Result<f64> {
        cpu_seconds(self.pid())
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// utime + stime of a process from `/proc/<pid>/stat`, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).context(&path)?;
    // Fields after the command name, which is in parentheses and may hold spaces:
    // state is field 3, utime 14, stime 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| BenchError::new(format!("{path}: unexpected format")))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (tick(11), tick(12)) {
        (Some(user), Some(system)) => Ok((user + system) / clock_ticks()),
        _ => Err(BenchError::new(format!("{path}: no utime/stime"))),
    }
}

/// `getconf CLK_TCK` (100 on Linux, asked once).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Polls `probe` every 50 ms until it returns `Ok(Some(_))`, fails, or `timeout`
/// passes.
pub fn wait_for<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe()? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(BenchError::new(format!(
                "timed out after {timeout:?} waiting for {what}"
            )));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Runs a command to completion and returns its stdout; `Err` with its stderr if
/// it failed.
pub fn output(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().context(format!("run {shown}"))?;
    stdout_of(&shown, out)
}

/// A command started with [`Command::spawn`], running while the caller reads
/// what it must read meanwhile; [`Running::finish`] is [`output`]'s end.
pub struct Running {
    shown: String,
    child: Child,
}

impl Running {
    /// Starts `cmd` with its stdout and stderr captured.
    pub fn start(cmd: &mut Command) -> Result<Self> {
        let shown = format!("{cmd:?}");
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context(format!("run {shown}"))?;
        Ok(Self { shown, child })
    }

    /// Waits for the command to end; its stdout, or an error if it failed.
    pub fn finish(self) -> Result<String> {
        let out = self
            .child
            .wait_with_output()
            .context(format!("run {}", self.shown))?;
        stdout_of(&self.shown, out)
    }
}

fn stdout_of(shown: &str, out: std::process::Output) -> Result<String> {
    if !out.status.success() {
        return Err(BenchError::new(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
