//! Unit tests of `import`: the helpers they share, and one module per concept.

use meshlimit_core::rules::config::KeyPartConfig;
use meshlimit_core::rules::MAX_RULE_NAME;

use super::*;

mod committed_files;
mod envoy_descriptors;
mod limitador_limits;
mod mappings;
mod peer_text;
mod rule_text;
mod work;

thread_local! {
    /// The importer's steps on this test's thread (`super::step`).
    pub(super) static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn mapping(options: &[&str]) -> Mapping {
    let options: Vec<String> = options.iter().map(|s| s.to_string()).collect();
    Mapping::from_options(&options).unwrap()
}

fn envoy(text: &str, options: &[&str]) -> Imported {
    convert(
        ImportFormat::EnvoyRatelimit,
        "rl.yaml",
        text,
        &mapping(options),
    )
}

fn errors(i: &Imported) -> Vec<String> {
    i.errors.iter().map(ToString::to_string).collect()
}
