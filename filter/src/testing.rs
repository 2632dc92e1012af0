//! The in-memory host (feature `test-util`): the filter's own tests and the
//! simulator run the filter's code over it. Shared data with proxy-wasm's
//! compare-and-swap, a clock that is set by hand or follows real time, and a
//! record of what the filter did to the proxy: agent calls dispatched (a test
//! answers them), local replies, resumed requests, properties, metrics, queue
//! wake-ups and the tick period. One host is one Envoy worker's VM, on one
//! thread, so interior mutability needs no lock.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use meshlimit_core::header_list::{HeaderList, MalformedHeaders};
use meshlimit_core::headers::Answer;

use crate::host::{AgentCall, AgentRequest, Host, Metric, Proxy, SharedError};
use crate::slots::SLOT_PREFIX;

type Interference = (String, Box<dyn Fn(&[u8]) -> Vec<u8>>);

#[derive(Debug, Clone, Copy)]
enum Clock {
    /// Set by hand (`set_now`).
    At(u64),
    /// The wall clock's nanoseconds since the Unix time `zero_unix_ns`.
    Wall { zero_unix_ns: u64 },
    /// Moves `step` nanoseconds at every look.
    Ticking { now: u64, step: u64 },
}

/// An agent call the filter dispatched, as the host received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatched {
    /// The token the filter's `on_http_call_response` is called with.
    pub token: u32,
    /// The context that dispatched it.
    pub context: u32,
    pub cluster: String,
    pub authority: String,
    pub auth: Option<String>,
    /// `POST` or `GET`.
    pub method: &'static str,
    pub path: String,
    /// The `accept` header of a `GET`.
    pub accept: Option<String>,
    /// The body of a `POST`.
    pub body: Vec<u8>,
    pub timeout_ms: u64,
}

/// What the filter did to one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stream {
    /// The request headers the host shows the filter.
    pub request_headers: Vec<(String, Vec<u8>)>,
    /// The local reply sent, if any.
    pub answer: Option<Answer>,
    /// How many times the request was resumed.
    pub resumed: u32,
    /// Response headers added.
    pub response_headers: Vec<(String, String)>,
    /// Properties set (filter state for the access log).
    pub properties: Vec<(String, String)>,
}

/// One Envoy worker's VM, in memory.
pub struct MemoryHost {
    clock: Cell<Clock>,
    data: RefCell<HashMap<String, (Vec<u8>, u32)>>,
    /// The shared-data key whose reads are counted, and the count.
    reads: RefCell<Option<(String, u32)>>,
    interfere: RefCell<Option<Interference>>,
    plugin_configuration: RefCell<Option<Vec<u8>>>,
    env: RefCell<HashMap<String, String>>,
    properties: RefCell<HashMap<String, Vec<u8>>>,
    tick_period_ms: Cell<Option<u64>>,
    metrics: RefCell<Vec<(String, i64)>>,
    queues: RefCell<Vec<(String, usize)>>,
    woken: RefCell<Vec<u32>>,
    context: Cell<u32>,
    streams: RefCell<HashMap<u32, Stream>>,
    calls: RefCell<Vec<Dispatched>>,
    next_token: Cell<u32>,
    refuse_calls: Cell<bool>,
    refuse_queues: Cell<bool>,
    refuse_wakes: Cell<bool>,
    response: RefCell<(Option<u32>, Vec<u8>)>,
}

impl Default for MemoryHost {
    fn default() -> Self {
        Self {
            clock: Cell::new(Clock::At(0)),
            data: RefCell::default(),
            reads: RefCell::default(),
            interfere: RefCell::default(),
            plugin_configuration: RefCell::default(),
            env: RefCell::default(),
            properties: RefCell::default(),
            tick_period_ms: Cell::default(),
            metrics: RefCell::default(),
            queues: RefCell::default(),
            woken: RefCell::default(),
            context: Cell::new(0),
            streams: RefCell::default(),
            calls: RefCell::default(),
            next_token: Cell::new(1),
            refuse_calls: Cell::new(false),
            refuse_queues: Cell::new(false),
            refuse_wakes: Cell::new(false),
            response: RefCell::default(),
        }
    }
}

impl MemoryHost {
    /// A host whose clock reads the wall clock's nanoseconds since the Unix
    /// time `zero_unix_ns`, as Envoy's clock reads the wall clock (and a
    /// store's `TIME` does): a wall clock slewed or stepped against the
    /// monotonic one moves the filter's clock with the store's.
    pub fn wall_since(zero_unix_ns: u64) -> Self {
        let host = Self::default();
        host.clock.set(Clock::Wall { zero_unix_ns });
        host
    }

    /// A host whose clock moves `step_ns` at every look (so a time budget is a
    /// number of looks).
    pub fn ticking(step_ns: u64) -> Self {
        let host = Self::default();
        host.clock.set(Clock::Ticking {
            now: 0,
            step: step_ns,
        });
        host
    }

    /// Sets the clock (it stays there until set again).
    pub fn set_now(&self, now_ns: u64) {
        self.clock.set(Clock::At(now_ns));
    }

    /// Simulates another worker writing `key` between the filter's next read of
    /// it and its write.
    pub fn interfere_once(&self, key: String, f: impl Fn(&[u8]) -> Vec<u8> + 'static) {
        *self.interfere.borrow_mut() = Some((key, Box::new(f)));
    }

    /// Counts the reads of shared data under `key` from now on (one key at a
    /// time: the simulator's gateways run on this host and count nothing).
    pub fn count_reads(&self, key: &str) {
        *self.reads.borrow_mut() = Some((key.to_string(), 0));
    }

    /// The reads counted since [`MemoryHost::count_reads`].
    pub fn reads_counted(&self) -> u32 {
        self.reads.borrow().as_ref().map_or(0, |(_, n)| *n)
    }

    /// Per-key slots in shared data.
    pub fn slot_count(&self) -> usize {
        let data = self.data.borrow();
        data.keys().filter(|k| k.starts_with(SLOT_PREFIX)).count()
    }

    /// The plugin configuration the VM is given.
    pub fn set_plugin_configuration(&self, config: &str) {
        *self.plugin_configuration.borrow_mut() = Some(config.as_bytes().to_vec());
    }

    /// A variable of the VM's environment.
    pub fn set_env(&self, name: &str, value: &str) {
        self.env
            .borrow_mut()
            .insert(name.to_string(), value.to_string());
    }

    /// A property the host shows (`&["node", "id"]`, `&["source", "address"]`).
    pub fn set_host_property(&self, path: &[&str], value: &str) {
        self.set_host_property_bytes(path, value.as_bytes());
    }

    /// A property the host shows as bytes (Envoy's serialized form: for
    /// `&["metadata"]`, a protobuf `envoy.config.core.v3.Metadata`).
    pub fn set_host_property_bytes(&self, path: &[&str], value: &[u8]) {
        self.properties
            .borrow_mut()
            .insert(path.join("\0"), value.to_vec());
    }

    /// Makes `context` the current one, as the proxy does before calling into it.
    pub fn enter(&self, context: u32) {
        self.context.set(context);
    }

    /// The request headers stream `context` shows the filter.
    pub fn set_request_headers(&self, context: u32, headers: &[(&str, &str)]) {
        self.streams
            .borrow_mut()
            .entry(context)
            .or_default()
            .request_headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect();
    }

    /// What the filter did to stream `context`.
    pub fn stream(&self, context: u32) -> Stream {
        self.streams
            .borrow()
            .get(&context)
            .cloned()
            .unwrap_or_default()
    }

    /// The last tick period set.
    pub fn tick_period_ms(&self) -> Option<u64> {
        self.tick_period_ms.get()
    }

    /// A metric's value; `None` when it was never defined.
    pub fn metric(&self, name: &str) -> Option<i64> {
        let metrics = self.metrics.borrow();
        metrics.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The queues woken since the last look, each once: the proxy calls the
    /// root context's `on_queue_ready` for each.
    pub fn take_woken_queues(&self) -> Vec<u32> {
        let mut woken = std::mem::take(&mut *self.woken.borrow_mut());
        woken.dedup();
        woken
    }

    /// The calls dispatched and not yet taken.
    pub fn take_calls(&self) -> Vec<Dispatched> {
        std::mem::take(&mut *self.calls.borrow_mut())
    }

    /// Calls dispatched so far (taken or not).
    pub fn calls_dispatched(&self) -> u32 {
        self.next_token.get().saturating_sub(1)
    }

    /// Makes the host refuse to register shared queues (a VM then has none).
    pub fn refuse_queues(&self, refuse: bool) {
        self.refuse_queues.set(refuse);
    }

    /// Makes the host refuse to wake a queue's consumer.
    pub fn refuse_wakes(&self, refuse: bool) {
        self.refuse_wakes.set(refuse);
    }

    /// Makes the host refuse (or accept again) every call the filter dispatches.
    pub fn refuse_calls(&self, refuse: bool) {
        self.refuse_calls.set(refuse);
    }

    /// The answer the next `on_http_call_response` reads: a status (`None`: the
    /// call failed, as on a timeout) and a body.
    pub fn set_call_response(&self, status: Option<u32>, body: &[u8]) {
        *self.response.borrow_mut() = (status, body.to_vec());
    }

    fn current(&self, f: impl FnOnce(&mut Stream)) {
        f(self
            .streams
            .borrow_mut()
            .entry(self.context.get())
            .or_default());
    }
}

/// The wall clock, in nanoseconds since the Unix epoch (0 before it).
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Host for MemoryHost {
    fn now_ns(&self) -> u64 {
        match self.clock.get() {
            Clock::At(ns) => ns,
            Clock::Wall { zero_unix_ns } => unix_ns().saturating_sub(zero_unix_ns),
            Clock::Ticking { now, step } => {
                let now = now.saturating_add(step);
                self.clock.set(Clock::Ticking { now, step });
                now
            }
        }
    }

    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        if let Some((watched, n)) = self.reads.borrow_mut().as_mut() {
            if watched == key {
                *n += 1;
            }
        }
        let found = self.data.borrow().get(key).cloned();
        if let Some((k, f)) = self.interfere.borrow_mut().take_if(|(k, _)| k == key) {
            let mut data = self.data.borrow_mut();
            let entry = data.entry(k).or_insert((Vec::new(), 0));
            entry.0 = f(&entry.0);
            entry.1 = entry.1.wrapping_add(1);
        }
        match found {
            Some((v, cas)) => (Some(v), Some(cas)),
            None => (None, None),
        }
    }

    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SharedError> {
        let mut data = self.data.borrow_mut();
        let current = data.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != current {
            return Err(SharedError::CasMismatch);
        }
        let next = current.unwrap_or(0).wrapping_add(1);
        data.insert(key.to_string(), (value.to_vec(), next));
        Ok(())
    }
}

impl Proxy for MemoryHost {
    fn plugin_configuration(&self) -> Option<Vec<u8>> {
        self.plugin_configuration.borrow().clone()
    }

    fn env_var(&self, name: &str) -> Option<String> {
        self.env.borrow().get(name).cloned()
    }

    fn property_bytes(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.properties.borrow().get(&path.join("\0")).cloned()
    }

    fn set_property(&self, name: &str, value: &str) {
        self.current(|s| s.properties.push((name.to_string(), value.to_string())));
    }

    fn set_tick_period(&self, ms: u64) {
        self.tick_period_ms.set(Some(ms));
    }

    /// One metric per name: defining a name again gives the same id.
    fn define_metric(&self, _kind: Metric, name: &str) -> Option<u32> {
        let mut metrics = self.metrics.borrow_mut();
        let index = match metrics.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                metrics.push((name.to_string(), 0));
                metrics.len() - 1
            }
        };
        u32::try_from(index).ok()
    }

    fn increment(&self, metric: u32, by: i64) {
        let mut metrics = self.metrics.borrow_mut();
        if let Some((_, v)) = usize::try_from(metric)
            .ok()
            .and_then(|i| metrics.get_mut(i))
        {
            *v = v.saturating_add(by);
        }
    }

    fn register_queue(&self, name: &str) -> Option<u32> {
        if self.refuse_queues.get() {
            return None;
        }
        let mut queues = self.queues.borrow_mut();
        queues.push((name.to_string(), 0));
        u32::try_from(queues.len() - 1).ok()
    }

    fn enqueue(&self, queue: u32) -> bool {
        if self.refuse_wakes.get() {
            return false;
        }
        let mut queues = self.queues.borrow_mut();
        let Some((_, len)) = usize::try_from(queue).ok().and_then(|i| queues.get_mut(i)) else {
            return false;
        };
        *len += 1;
        self.woken.borrow_mut().push(queue);
        true
    }

    fn take_wake(&self, queue: u32) {
        let mut queues = self.queues.borrow_mut();
        if let Some((_, len)) = usize::try_from(queue).ok().and_then(|i| queues.get_mut(i)) {
            *len = len.saturating_sub(1);
        }
    }

    fn dispatch(&self, call: AgentCall<'_>) -> Option<u32> {
        if self.refuse_calls.get() {
            return None;
        }
        let token = self.next_token.get();
        self.next_token.set(token.wrapping_add(1));
        let (method, accept, body) = match call.request {
            AgentRequest::Post(body) => ("POST", None, body.to_vec()),
            AgentRequest::Get { accept } => ("GET", Some(accept.to_string()), Vec::new()),
        };
        self.calls.borrow_mut().push(Dispatched {
            token,
            context: self.context.get(),
            cluster: call.cluster.to_string(),
            authority: call.authority.to_string(),
            auth: call.auth.map(str::to_string),
            method,
            path: call.path.to_string(),
            accept,
            body,
            timeout_ms: crate::config::millis(call.timeout),
        });
        Some(token)
    }

    fn call_response(&self, body_size: usize) -> (Option<u32>, Vec<u8>) {
        let (status, body) = self.response.borrow().clone();
        (status, body.into_iter().take(body_size).collect())
    }

    fn request_headers(&self) -> Result<HeaderList, MalformedHeaders> {
        let streams = self.streams.borrow();
        Ok(streams
            .get(&self.context.get())
            .map(|s| HeaderList::from_pairs(s.request_headers.iter().map(|(n, v)| (n, v))))
            .unwrap_or_default())
    }

    fn add_response_header(&self, name: &str, value: &str) {
        self.current(|s| {
            s.response_headers
                .push((name.to_string(), value.to_string()))
        });
    }

    fn send_answer(&self, answer: Answer) {
        self.current(|s| s.answer = Some(answer));
    }

    fn resume_request(&self) {
        self.current(|s| s.resumed += 1);
    }

    fn act_for(&self, context_id: u32) {
        self.context.set(context_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_cas_is_refused() {
        let host = MemoryHost::default();
        assert_eq!(host.shared_set("k", b"a", None), Ok(()));
        let (_, cas) = host.shared_get("k");
        assert_eq!(host.shared_set("k", b"b", cas), Ok(()));
        assert_eq!(
            host.shared_set("k", b"c", cas),
            Err(SharedError::CasMismatch)
        );
        assert_eq!(host.shared_get("k").0.as_deref(), Some(&b"b"[..]));
    }
}
