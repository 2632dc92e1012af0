//! The generated reference pages (docs/reference/cli-meshlimit.md,
//! cli-agent.md, metrics.md, rules.md) are what the code gives today. With
//! MESHLIMIT_BLESS=1 the test rewrites them instead. Needs no Envoy, Redis or
//! network: the fast tier.

use std::path::Path;

use meshlimit_cli::reference::{pages, REGENERATE};

#[test]
fn the_committed_reference_pages_are_the_generated_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bless = std::env::var_os("MESHLIMIT_BLESS").is_some();
    let mut stale = Vec::new();
    for page in pages().unwrap() {
        let path = root.join(page.path);
        if bless {
            std::fs::write(&path, &page.text).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != page.text {
            stale.push(format!(
                "{}: {}",
                page.path,
                first_difference(&committed, &page.text)
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "generated reference pages differ from the code:\n  {}\nregenerate them with\n  {REGENERATE}",
        stale.join("\n  ")
    );
}

/// Where `committed` and `generated` first differ, by line.
fn first_difference(committed: &str, generated: &str) -> String {
    let (mut old, mut new) = (committed.lines(), generated.lines());
    for line in 1.. {
        match (old.next(), new.next()) {
            (Some(a), Some(b)) if a == b => continue,
            (None, None) => return "differs in line endings".into(),
            (a, b) => {
                return format!(
                    "line {line}: committed {:?}, generated {:?}",
                    a.unwrap_or("(end)"),
                    b.unwrap_or("(end)")
                )
            }
        }
    }
    unreachable!()
}
