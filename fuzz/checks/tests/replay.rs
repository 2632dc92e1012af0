//! Replays every committed corpus file (`fuzz/corpus/<target>/*`) through its
//! target's checks, on stable Rust: the inputs the fuzzers keep as interesting
//! are checked by `cargo test`, on machines without nightly.

use std::fs;
use std::path::Path;

#[test]
fn every_corpus_file_passes_its_target() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus");
    let mut dirs: Vec<_> = fs::read_dir(&corpus)
        .unwrap_or_else(|e| panic!("{}: {e}", corpus.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut seen = Vec::new();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let check = meshlimit_fuzz_checks::target(&name)
            .unwrap_or_else(|| panic!("{}: no fuzz target named {name}", dir.display()));
        let mut files: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: empty corpus", dir.display());
        for file in &files {
            let data = fs::read(file).unwrap();
            // A panic names the file that caused it.
            let result = std::panic::catch_unwind(|| check(&data));
            assert!(
                result.is_ok(),
                "{name}: {} fails its checks",
                file.display()
            );
        }
        seen.push(name);
    }
    for (name, _) in meshlimit_fuzz_checks::TARGETS {
        assert!(seen.iter().any(|s| s == name), "no corpus for {name}");
    }
}
