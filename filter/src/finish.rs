//! How a decided request ends: its decision counted, logged and named for the
//! access log, then the request resumed or answered locally. The HTTP context
//! ends its own requests here; the root context ends the requests its lease
//! calls decided, acting as each one's context.

use std::rc::Rc;

use meshlimit_core::decision::{decide, HeldQuota};
use meshlimit_core::headers::{self, HeaderStyle, Protocol};
use meshlimit_core::{RequestInfo, Verdict};
use proxy_wasm::types::Action;

use crate::config::FilterConfig;
use crate::decided::Decided;
use crate::declog;
use crate::flights::{Call, Finished};
use crate::host::Proxy;
use crate::pipeline::Evaluation;
use crate::state::Shared;

/// Whether a local answer to the request takes the gRPC form: read only
/// when one is sent, not for every request.
pub(crate) fn protocol_of(info: &RequestInfo) -> Protocol {
    Protocol::of_content_type(info.headers.get("content-type"))
}

/// Counts every rule's decision, names it in the stream's filter state for the
/// access log (one value, [`crate::decided::PROPERTY`]), and carries out the
/// verdict for the request `info`: `Continue`, or a local answer in its
/// protocol's form sent (`Pause`). An allowed request's quota is returned,
/// for its response.
pub(crate) fn finish<H: Proxy>(
    host: &H,
    vm: &Shared,
    config: &FilterConfig,
    info: &RequestInfo,
    eval: &Evaluation,
) -> (Action, Option<HeldQuota>) {
    let results = eval.results();
    let verdict = decide(&results);
    let decided = {
        let mut vm = vm.borrow_mut();
        let vm = &mut *vm;
        let decided = Decided::of(
            &verdict,
            &results,
            |rule| eval.key_of(rule),
            |key, fingerprint| vm.key_ids.id(&config.key_ids, fingerprint, key),
        );
        for r in &results {
            vm.counts.record(host, r.rule, r.outcome());
        }
        if config.decision_log {
            let request_id = || info.header(declog::REQUEST_ID_HEADER);
            vm.declog.record(
                &config.key_ids,
                eval,
                decided.as_ref(),
                request_id,
                eval.decided_at_ns,
            );
        }
        decided
    };
    if let Some(decided) = &decided {
        let mut vm = vm.borrow_mut();
        decided.with_value(&mut vm.decided_value, |value| {
            host.set_property(crate::decided::PROPERTY, value);
        });
    }
    match verdict {
        Verdict::Allow { tightest } => {
            let quota = tightest.as_ref().and_then(HeldQuota::keep);
            (Action::Continue, quota)
        }
        refused => {
            answer_locally(host, info, config.response_headers, &refused);
            (Action::Pause, None)
        }
    }
}

/// Sends the local answer of a request its `verdict` rejects (429) or
/// fails closed (503), in the request's protocol's form. Out of `finish`,
/// whose code every request enters.
#[inline(never)]
fn answer_locally<H: Proxy>(
    host: &H,
    info: &RequestInfo,
    style: HeaderStyle,
    verdict: &Verdict<'_>,
) {
    let answer = match *verdict {
        Verdict::Deny {
            rule,
            limit,
            retry_after_ns,
        } => headers::rejection(protocol_of(info), style, rule, &limit, retry_after_ns),
        Verdict::Unavailable { rule } => headers::unavailable(protocol_of(info), rule),
        Verdict::Allow { .. } => return,
    };
    host.send_answer(answer);
}

/// Finishes requests the VM's lease calls decided, each acting as its own
/// context: counts, the local answer or the resumed request.
pub(crate) fn finish_waiting<H: Proxy>(
    host: &H,
    vm: &Shared,
    config: &FilterConfig,
    decided: Finished<u32>,
) {
    for (id, eval) in decided {
        let Some(waiting) = vm.borrow_mut().waiting.remove(&id) else {
            continue;
        };
        host.act_for(id);
        let info = &waiting.info;
        let (action, quota) = finish(host, vm, config, info, &eval);
        *waiting.quota.borrow_mut() = quota;
        if let Action::Continue = action {
            host.resume_request();
        }
    }
}

/// Fails the VM's queued items when the root context cannot be woken to send
/// them: every request waiting on them takes its failure policy.
pub(crate) fn fail_queued<H: Proxy>(host: &H, vm: &Shared) {
    let config = Rc::clone(&vm.borrow().config);
    let mut decided = Finished::new();
    loop {
        // Each borrow ends before the next: a `while let` would hold the
        // first for the whole loop body, and the second would panic.
        let batch = vm.borrow_mut().flights.take_items("");
        let Some(items) = batch else {
            break;
        };
        let answered = vm
            .borrow_mut()
            .flights
            .answered(host, &config, Call::Unsent(items), None);
        decided.extend(answered);
    }
    finish_waiting(host, vm, &config, decided);
}
