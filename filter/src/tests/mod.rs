//! The filter as Envoy drives it: the root and HTTP contexts called as the
//! proxy calls them, over the in-memory host. Each test names what a user of
//! the filter would observe.

use std::collections::HashMap;
use std::rc::Rc;

use meshlimit_core::header_list::HeaderList;
use meshlimit_core::headers::Answer;
use meshlimit_core::rules::lines::{self, RULES_LINES_TYPE};
use meshlimit_core::secret::{Secret, SECRET_ENV};
use meshlimit_core::wire::{
    DecisionsRequest, LeaseAnswer, LeaseRequest, LeaseResponse, SyncRequest, SyncResponse,
    DECISIONS_PATH, LEASE_PATH, RULES_PATH, SYNC_PATH, WIRE_VERSION,
};
use meshlimit_core::{DescriptorKey, RuleSet};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::Action;

use crate::host::Host;
use crate::http::Http;
use crate::root::Root;
use crate::state::AGENT_ALIVE_NS;
use crate::testing::{Dispatched, MemoryHost};

mod decision_log;
mod failures;
mod leases;
mod request_info;
mod rules_sync;
mod slices;

const ROOT: u32 = 1;
const MS: u64 = 1_000_000;
const SECRET: &str = "a deployment secret of at least thirty-two bytes";

/// One Envoy worker's VM: its root context and the streams it created.
struct Vm {
    host: Rc<MemoryHost>,
    root: Root<MemoryHost>,
    // Concrete, not `dyn HttpContext`: the trait's default methods call
    // hostcalls, which a native test binary cannot link.
    streams: HashMap<u32, Http<MemoryHost>>,
    next_context: u32,
}

impl Vm {
    /// A VM on `host` (another VM of the same Envoy shares it), configured with
    /// `plugin_config`; the bool is what `on_configure` answered.
    fn start(host: &Rc<MemoryHost>, plugin_config: &str) -> (Vm, bool) {
        host.set_plugin_configuration(plugin_config);
        host.enter(ROOT);
        let mut root = Root::new(ROOT, Rc::clone(host));
        let configured = root.on_configure(plugin_config.len());
        let vm = Vm {
            host: Rc::clone(host),
            root,
            streams: HashMap::new(),
            next_context: ROOT + 1,
        };
        (vm, configured)
    }

    /// A VM on a fresh host (node `node-a`, the secret in its environment) with
    /// `rules` from its first sync.
    fn with_rules(rules: serde_json::Value) -> Vm {
        let host = Rc::new(MemoryHost::default());
        host.set_now(1_000 * MS);
        host.set_env(SECRET_ENV, SECRET);
        host.set_host_property(&["node", "id"], "node-a");
        let (mut vm, configured) = Vm::start(&host, "{}");
        assert!(configured);
        vm.sync_rules(rules);
        vm
    }

    /// A tick's sync finds the agent on the version of `rules`; the VM fetches
    /// them and the agent answers with their lines.
    fn sync_rules(&mut self, rules: serde_json::Value) {
        let (version, lines) = served(rules);
        self.tick();
        let sync = self.only_call();
        self.answer(&sync, Some(200), &sync_answer(&version));
        let fetch = self.only_call();
        self.answer(&fetch, Some(200), &lines);
    }

    fn tick(&mut self) {
        self.host.enter(ROOT);
        self.root.on_tick();
    }

    /// A request with these headers: its context id and what the filter
    /// answered to its headers.
    fn request(&mut self, headers: &[(&str, &str)]) -> (u32, Action) {
        let id = self.next_context;
        self.next_context += 1;
        self.host.set_request_headers(id, headers);
        let mut stream = self.root.http(id);
        self.host.enter(id);
        let action = stream.on_http_request_headers(headers.len(), true);
        self.streams.insert(id, stream);
        (id, action)
    }

    /// A request for `key` on `/search`.
    fn get(&mut self, key: &str) -> (u32, Action) {
        self.request(&[
            (":method", "GET"),
            (":path", "/search"),
            (":authority", "api.example.com"),
            ("x-api-key", key),
        ])
    }

    /// The worker's event loop turns: the root context hears of every queue
    /// woken since.
    fn turn(&mut self) {
        for queue in self.host.take_woken_queues() {
            self.host.enter(ROOT);
            self.root.on_queue_ready(queue);
        }
    }

    /// Delivers the answer to a call to the context that dispatched it.
    fn answer(&mut self, call: &Dispatched, status: Option<u32>, body: &[u8]) {
        self.host.set_call_response(status, body);
        self.host.enter(call.context);
        if call.context == ROOT {
            self.root
                .on_http_call_response(call.token, 1, body.len(), 0);
        } else if let Some(stream) = self.streams.get_mut(&call.context) {
            stream.on_http_call_response(call.token, 1, body.len(), 0);
        }
    }

    /// The response's headers reach the filter.
    fn respond(&mut self, id: u32) {
        self.host.enter(id);
        if let Some(stream) = self.streams.get_mut(&id) {
            stream.on_http_response_headers(2, false);
        }
    }

    /// The HTTP status of the local reply stream `id` got, if it got one.
    fn replied(&self, id: u32) -> Option<u32> {
        match self.host.stream(id).answer {
            Some(Answer::Http { status, .. }) => Some(status),
            _ => None,
        }
    }

    /// The one call dispatched since the last look.
    fn only_call(&self) -> Dispatched {
        let mut calls = self.host.take_calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        calls.remove(0)
    }

    /// One request for `key`, its lease call granting one token.
    fn get_with_granted_call(&mut self, key: &str) -> u32 {
        let (id, action) = self.get(key);
        assert_eq!(action, Action::Pause);
        self.send_and_answer(grant(1, 9, 100));
        id
    }

    /// The worker's loop turns, and the one lease call it sends is answered
    /// with `answer`.
    fn send_and_answer(&mut self, answer: LeaseAnswer) {
        self.turn();
        let call = self.only_call();
        self.answer(&call, Some(200), &lease_answer(vec![answer]));
    }

    /// One request for `key`, denied by the agent for a minute: the key's
    /// later requests are answered from the cached denial.
    fn deny_for_a_minute(&mut self, key: &str) {
        let (first, _) = self.get(key);
        self.send_and_answer(minute_denial());
        assert_eq!(self.replied(first), Some(429));
    }

    /// One request for `key`, its lease call failing.
    fn get_with_failed_call(&mut self, key: &str) -> u32 {
        let (id, action) = self.get(key);
        assert_eq!(action, Action::Pause);
        self.turn();
        let call = self.only_call();
        self.answer(&call, None, b"");
        id
    }
}

/// The version of `rules` and their lines, as the agent serves them.
fn served(rules: serde_json::Value) -> (String, Vec<u8>) {
    let set = RuleSet::compile(&serde_json::from_value(rules).unwrap()).unwrap();
    (set.version().to_string(), lines::encode(&set).unwrap())
}

fn sync_answer(version: &str) -> Vec<u8> {
    serde_json::to_vec(&SyncResponse {
        v: WIRE_VERSION,
        version: version.into(),
        rules: None,
        live_nodes: None,
    })
    .unwrap()
}

/// The agent's denial of a key for a minute.
fn minute_denial() -> LeaseAnswer {
    LeaseAnswer::Deny {
        retry_after_ms: 60_000,
        local: false,
        from: None,
    }
}

fn lease_answer(items: Vec<LeaseAnswer>) -> Vec<u8> {
    serde_json::to_vec(&LeaseResponse {
        v: WIRE_VERSION,
        items,
    })
    .unwrap()
}

/// A store grant of `tokens` for 300 ms, with what the store has left.
fn grant(tokens: u32, remaining: u32, reset_ms: u64) -> LeaseAnswer {
    LeaseAnswer::Grant {
        tokens,
        ttl_ms: 300,
        remaining,
        reset_ms,
        local: false,
        from: None,
        next_ask_ms: None,
    }
}

fn per_key(on_failure: &str) -> serde_json::Value {
    serde_json::json!({"version": 1, "rules": [
        {"name": "per-key", "match": {"path_prefix": "/search"}, "key": [{"header": "x-api-key"}],
         "limit": {"requests": 10, "per": "1s"}, "on_failure": on_failure},
    ]})
}

fn field<'a>(fields: &'a HeaderList, name: &str) -> Option<&'a str> {
    fields.get(name).and_then(|v| std::str::from_utf8(v).ok())
}
