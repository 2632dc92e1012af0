//! Helpers shared by the CLI's tests: the built `meshlimit` binary, run as an
//! operator runs it.

// Not every module uses every helper.
#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

/// The deployment secret of these tests.
pub const SECRET: &str = "agent-api-tests-secret-0123456789abcdef";

/// The built `meshlimit` binary, as an operator runs it: no `MESHLIMIT_*`
/// variable from the test's environment but this deployment's secret.
pub fn cli_command(args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_meshlimit"));
    cmd.args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MESHLIMIT_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("MESHLIMIT_SECRET", SECRET);
    cmd
}

/// Runs `cmd`: its exit code, stdout and stderr.
pub fn run(cmd: &mut std::process::Command) -> (i32, String, String) {
    let std::process::Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

/// Writes `content` as `dir/rules.yaml`; its path.
pub fn rules_file(dir: &std::path::Path, content: &str) -> String {
    let path = dir.join("rules.yaml");
    std::fs::write(&path, content).unwrap();
    path.display().to_string()
}
