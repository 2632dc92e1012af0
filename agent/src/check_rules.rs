//! `meshlimit-agent check-rules PATH`: validates a rules file the way the agent
//! would load it, for CI and for people editing a ConfigMap.

use std::io::Write;
use std::path::Path;

use meshlimit_core::rules::parse_rules;

/// Checks `path`; prints `PATH: ok (N rules, version V)` on `out` when valid, else
/// every problem as `PATH: rule NAME: field FIELD: what is wrong` on `err`.
/// Returns the exit code: 0 valid, 1 invalid or unreadable.
pub fn check_rules(path: &Path, out: &mut impl Write, err: &mut impl Write) -> u8 {
    let file = path.display().to_string();
    let text = match crate::rules_watch::read_rules_file(path) {
        Ok(text) => text,
        Err(e) => {
            let _ = writeln!(err, "{file}: cannot read: {e}");
            return 1;
        }
    };
    match parse_rules(&file, &text) {
        Ok(set) => {
            let _ = writeln!(
                out,
                "{file}: ok ({} rules, version {})",
                set.rules().len(),
                set.version()
            );
            0
        }
        Err(errors) => {
            for e in &errors.errors {
                let _ = writeln!(err, "{e}");
            }
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(content: &str) -> (u8, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.yaml");
        std::fs::write(&path, content).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = check_rules(&path, &mut out, &mut err);
        let text = |b: Vec<u8>| {
            String::from_utf8(b)
                .unwrap()
                .replace(&path.display().to_string(), "PATH")
        };
        (code, text(out), text(err))
    }

    #[test]
    fn good_and_bad_files() {
        let (code, out, _) = check(
            "version: 1\nrules:\n  - {name: a, key: [method], limit: {requests: 1, per: 1s}}\n",
        );
        assert_eq!(code, 0);
        assert!(out.starts_with("PATH: ok (1 rules, version "), "{out}");
        let (code, _, err) = check(
            "version: 1\nrules:\n  - {name: a, key: [method], limit: {requests: 0, per: 1s}}\n",
        );
        assert_eq!(code, 1);
        assert_eq!(
            err,
            "PATH: rule a: field limit.requests: must be at least 1\n"
        );
    }

    #[test]
    fn unreadable_is_one_line() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = check_rules(Path::new("/nonexistent/r.yaml"), &mut out, &mut err);
        assert_eq!(code, 1);
        let err = String::from_utf8(err).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("/nonexistent/r.yaml: cannot read:"));
    }
}
