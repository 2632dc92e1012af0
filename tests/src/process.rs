//! A child process that is always killed: on drop, on a failed start, on panic.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::wait::{wait_for, Probe};

/// A started process whose stdout and stderr go to `<name>.stdout.log` and
/// `<name>.stderr.log` in its log directory (appended, so a restart keeps the
/// earlier runs' output).
#[derive(Debug)]
pub(crate) struct Proc {
    name: String,
    child: Child,
    stdout_log: PathBuf,
    stderr_log: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    pub(crate) fn spawn(name: &str, mut command: Command, log_dir: &Path) -> Proc {
        let stdout_log = log_dir.join(format!("{name}.stdout.log"));
        let stderr_log = log_dir.join(format!("{name}.stderr.log"));
        let program = format!("{command:?}");
        let mut stderr = open_log(&stderr_log);
        let _ = writeln!(stderr, "--- meshlimit-tests: starting {program}");
        command
            .stdin(Stdio::null())
            .stdout(open_log(&stdout_log))
            .stderr(stderr);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({program}): {e}"));
        Proc {
            name: name.to_string(),
            child,
            stdout_log,
            stderr_log,
            status: None,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the process has exited.
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// `Probe::Failed` when the process has exited, with its stderr's tail.
    pub(crate) fn exited_probe<T>(&mut self) -> Option<Probe<T>> {
        let status = self.exit_status()?;
        Some(Probe::Failed(format!(
            "{} exited ({status}); stderr:\n{}",
            self.name,
            self.stderr_tail(40)
        )))
    }

    /// Asks the process to stop (SIGTERM), waits up to `grace`, then kills it.
    pub(crate) fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.exit_status().is_none() {
            // Not yet reaped, so the pid is still ours to signal.
            let _ = Command::new("kill")
                .args(["-TERM", &self.pid().to_string()])
                .stderr(Stdio::null())
                .status();
            let exited = wait_for(grace, "exit after SIGTERM", || match self.exit_status() {
                Some(status) => Probe::Ready(status),
                None => Probe::Pending,
            });
            if exited.is_err() {
                self.kill();
            }
        }
        self.exit_status()
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub(crate) fn kill(&mut self) {
        if self.exit_status().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    pub(crate) fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_log).unwrap_or_default()
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    pub(crate) fn stderr_tail(&self, lines: usize) -> String {
        tail(&self.stderr(), lines)
    }

    pub(crate) fn stdout_tail(&self, lines: usize) -> String {
        tail(&self.stdout(), lines)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn open_log(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open log {}: {e}", path.display()))
}

/// Sends `sig` (`-STOP`, `-CONT`, `-KILL`, …) to `pid` with `kill`, as a test
/// stalls or resumes a process it started.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}
