//! A decision record costs the agent its parse's allocations and no more:
//! under overload every rejection is a record, thousands a second on one
//! node, so what the log does per record is counted here, exactly, with a
//! counting allocator (this test binary's own).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use meshlimit_agent::decision_log::DecisionLog;
use meshlimit_agent::decision_log::DecisionLogMetrics;
use meshlimit_agent::metrics::Registry;
use meshlimit_core::wire::{DecisionsRequest, MAX_DECISION_RECORDS};

/// The system allocator, counting. (`GlobalAlloc` can only be implemented
/// unsafely; each method hands its arguments to `System` unchanged.)
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    f();
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

#[test]
fn a_record_costs_the_log_no_allocation_past_its_parse() {
    let log = DecisionLog::in_memory(Arc::new(DecisionLogMetrics::new(&Registry::new()).unwrap()));
    let bodies: Vec<Vec<u8>> = (0..40).map(meshlimit_tests::decision_batch_body).collect();
    // Fill the ring (1,024 records) and count the key, so what follows is
    // the steady state of a node under overload.
    for b in &bodies[..10] {
        log.accept(serde_json::from_slice(b).unwrap());
    }
    let (mut parse, mut accept) = (0, 0);
    for b in &bodies[10..] {
        let mut batch: Option<DecisionsRequest> = None;
        parse += allocations(|| batch = Some(serde_json::from_slice(b).unwrap()));
        let batch = batch.unwrap();
        accept += allocations(|| log.accept(batch));
    }
    let records = (30 * MAX_DECISION_RECORDS) as f64;
    let (parse, accept) = (parse as f64 / records, accept as f64 / records);
    println!("allocations per record: parse {parse:.2}, the log {accept:.2}");
    // The parse: the record's four strings and the batch's list (amortized).
    assert!((4.0..5.0).contains(&parse), "parse {parse:.2}");
    // The log: one shared name of the batch's VM, nothing per record (not
    // each record's line built with its own copies and formatted time, nor
    // its hot key looked up by a copied rule and key id).
    assert!(accept < 0.05, "the log {accept:.2} a record");
}
