//! `meshlimit check-rules` against a file built to exhaust its memory: a
//! "billion laughs" of YAML aliases is refused within a stated bound.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use meshlimit_tests::{billion_laughs, proc_bytes};

const BIN: &str = env!("CARGO_BIN_EXE_meshlimit");
/// The bound on refusing a billion-laughs file: what reading a file of the
/// same size without aliases costs, plus this.
const LAUGHS_MARGIN_BYTES: u64 = 2 * 1024 * 1024;
/// `check-rules`' peak refusing it, whatever the baseline: far below the
/// hundreds of MiB an expansion takes.
const LAUGHS_PEAK_BYTES: u64 = 32 * 1024 * 1024;

/// Kills the child on drop, so a failed assertion leaves no process behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `check-rules FILE` run on `text`, which it must refuse: its exit code, its
/// error text, and its peak RSS (VmHWM) while it waits to print it.
///
/// check-rules exits within milliseconds, too fast to sample. So its stderr is
/// a FIFO filled to capacity (64 KiB) before it starts: its error line then
/// blocks until the test reads, and VmHWM is read while it waits. Its address
/// space is capped too (ulimit -v, 256 MiB), so a CLI that expanded aliases
/// fails here instead of taking the machine's memory.
fn refused_by_check_rules(dir: &Path, text: &str) -> (Option<i32>, String, u64) {
    let path = dir.join("rules.yaml");
    std::fs::write(&path, text).unwrap();
    let fifo = dir.join("stderr");
    let _ = std::fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let child = Command::new("sh")
        .args([
            "-c",
            "exec 2>\"$2\"; head -c 65536 /dev/zero >&2; ulimit -v 262144; exec \"$0\" check-rules \"$1\"",
            BIN,
            &path.display().to_string(),
            &fifo.display().to_string(),
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    let mut stderr = std::fs::File::open(&fifo).unwrap();
    let pid = child.0.id();
    let is_cli = || {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe.ends_with("meshlimit"))
    };
    // Once it runs the CLI, its peak only grows until it blocks on stderr:
    // read it until the kernel shows it waiting there (`pipe_write`, or
    // `anon_pipe_write` on newer kernels), however long a loaded machine
    // takes to get there: a fixed window closes early on a loaded machine,
    // before a fresh build's first run has read its file. A kernel that
    // hides `wchan` leaves the deadline to end it.
    let blocked = || {
        std::fs::read_to_string(format!("/proc/{pid}/wchan"))
            .is_ok_and(|w| w.contains("pipe_write"))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut peak = 0;
    while Instant::now() < deadline {
        if is_cli() {
            let done = blocked();
            peak = peak.max(proc_bytes(pid, "VmHWM").unwrap_or(0));
            if done {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut err = Vec::new();
    stderr.read_to_end(&mut err).unwrap();
    let status = child.0.wait().unwrap();
    let err = String::from_utf8_lossy(&err[65536.min(err.len())..]).to_string();
    assert!(peak > 0, "VmHWM was never read");
    (status.code(), err, peak)
}

#[test]
fn check_rules_refuses_a_billion_laughs_within_its_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    // The same file with its aliases spelled as plain words (as long): read
    // to the end and refused for its unknown fields, which costs what reading
    // the file costs. Refusing the aliases must cost no more than that: the
    // process's own size (binary, allocator) varies by machine and build,
    // the expansion would be hundreds of MiB.
    let plain = billion_laughs().replace('*', "x");
    let (code, err, baseline) = refused_by_check_rules(dir.path(), &plain);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("aliases"), "{err}");
    let (code, err, peak) = refused_by_check_rules(dir.path(), &billion_laughs());
    assert_eq!(code, Some(1), "{err}");
    let file = dir.path().join("rules.yaml").display().to_string();
    assert!(
        err.starts_with(&format!("{file}:3:12: YAML aliases"))
            && err.contains("YAML aliases (`*name`) are not allowed"),
        "{err}"
    );
    eprintln!(
        "check-rules peak RSS (VmHWM): {peak} bytes refusing the aliases, {baseline} reading the same file without them"
    );
    assert!(
        peak < baseline + LAUGHS_MARGIN_BYTES && peak < LAUGHS_PEAK_BYTES,
        "check-rules peaked at {peak} bytes refusing the aliases, {baseline} without them"
    );
}
