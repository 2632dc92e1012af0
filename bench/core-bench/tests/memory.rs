//! What a large rule set costs in memory, counted by a counting allocator (this
//! test binary's only): the parsed file (`RulesConfig`), the compiled `RuleSet`
//! (which keeps a copy of the normalised file, as served), and the served JSON.
//! Run with `cargo test -p meshlimit-core-bench --test memory -- --nocapture`
//! to see the figures; the test itself checks they stay proportional.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use meshlimit_core::RuleSet;
use meshlimit_core_bench::rule_set_config;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to `System` unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[test]
fn a_large_set_costs_memory_in_proportion() {
    let mut per_rule = Vec::new();
    for n in [1_000usize, 20_000] {
        let before = live();
        let config = rule_set_config(n).unwrap();
        let parsed = live() - before;
        let before = live();
        let set = RuleSet::compile(&config).unwrap();
        let compiled = live() - before;
        let before = live();
        let unserved = RuleSet::compile_unserved(&config).unwrap();
        let lean = live() - before;
        let before = live();
        let copy = config.clone();
        let copied = live() - before;
        let json = serde_json::to_vec(&config).unwrap();
        println!(
            "{n} rules: parsed file {parsed} B ({} B/rule); compiled set {compiled} B \
             ({} B/rule), of which its copy of the file {copied} B; compiled without \
             the copy (the filter's) {lean} B ({} B/rule); served JSON {} B",
            parsed / n as isize,
            compiled / n as isize,
            lean / n as isize,
            json.len()
        );
        drop(copy);
        per_rule.push(compiled / n as isize);
        assert!(unserved.config().is_none() && set.config().is_some());
        assert!(lean < compiled - copied / 2, "{lean} {compiled} {copied}");
        drop((set, unserved, config, json));
    }
    // Proportional: the cost per rule does not grow with the number of rules
    // (the 20,000 rules' names and paths are a little longer).
    assert!(per_rule[1] < per_rule[0] * 5 / 4, "{per_rule:?}");
}
