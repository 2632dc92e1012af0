//! Helpers shared by core's tests.

/// Cases for a property test: `PROPTEST_CASES` when set (`make mutants` runs
/// every mutant with fewer, to fit its time budget), else `default`.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
