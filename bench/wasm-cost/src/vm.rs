//! One Envoy worker's VM of a proxy-wasm module, driven the way Envoy drives
//! it (contexts created, headers handed in, queues woken, calls answered),
//! with the fuel each step burned.

use meshlimit_core::rules::lines;
use meshlimit_core::wire::{
    LeaseAnswer, LeaseRequest, LeaseResponse, SyncResponse, DECISIONS_PATH, LEASE_PATH, RULES_PATH,
    SYNC_PATH, WIRE_VERSION,
};
use meshlimit_core::RuleSet;
use wasmi::{Config, Engine, Error, Func, Instance, Module, Store, Val};

use crate::host::{self, Call, State};

const ROOT: i32 = 1;
/// Fuel the store starts with: far more than a run burns.
const TANK: u64 = u64::MAX / 4;

/// The agent the VM talks to: its rules and how it answers leases.
pub struct Agent {
    pub rules: Option<RuleSet>,
    /// Tokens per grant.
    pub grant: u32,
    pub ttl_ms: u64,
    /// Deny every key for a minute instead.
    pub deny: bool,
}

/// What one request burned, by the callback that burned it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Burned {
    /// `proxy_on_request_headers`, and the loop turns and call answers it waited on.
    pub request: u64,
    /// `proxy_on_response_headers`.
    pub response: u64,
    /// `proxy_on_log`, `proxy_on_done` and `proxy_on_delete`.
    pub end: u64,
    /// Host calls made.
    pub host_calls: u64,
    /// Lease calls to the agent it started (decision-log batches are not
    /// counted here: they are in `host_calls`).
    pub agent_calls: u64,
    /// A local reply's status (429), if it got one.
    pub replied: Option<i32>,
}

impl Burned {
    pub fn total(&self) -> u64 {
        self.request + self.response + self.end
    }
}

pub struct Vm {
    store: Store<State>,
    instance: Instance,
    agent: Agent,
    next_context: i32,
    /// The fuel left when the last request began.
    last_start: u64,
}

impl Vm {
    /// The module `wasm` started and configured with `plugin_configuration`;
    /// a meshlimit filter then syncs its rules from `agent`.
    pub fn start(
        wasm: &[u8],
        plugin_configuration: &str,
        env: Vec<(String, String)>,
        agent: Agent,
    ) -> Result<Vm, Error> {
        let mut config = Config::default();
        config.consume_fuel(true);
        config.compilation_mode(wasmi::CompilationMode::Eager);
        let engine = Engine::new(&config);
        let module = Module::new(&engine, wasm)?;
        // 2026-01-01, so schedule windows read a plausible date.
        let state = State::new(1_767_225_600 * 1_000_000_000, env, plugin_configuration);
        let mut store = Store::new(&engine, state);
        store.set_fuel(TANK)?;
        let linker = host::linker(&engine, &module)?;
        let instance = linker.instantiate_and_start(&mut store, &module)?;
        let mut vm = Vm {
            store,
            instance,
            agent,
            next_context: ROOT + 1,
            last_start: 0,
        };
        if vm.func("_initialize").is_ok() {
            vm.call("_initialize", &[])?;
        }
        vm.call("proxy_on_context_create", &[ROOT, 0])?;
        vm.call("proxy_on_vm_start", &[ROOT, 0])?;
        let size = i32::try_from(plugin_configuration.len()).unwrap_or(i32::MAX);
        if vm.call("proxy_on_configure", &[ROOT, size])? != Some(1) {
            return Err(Error::new(format!(
                "the module refused its configuration: {:?}",
                vm.store.data().warnings
            )));
        }
        vm.tick()?;
        Ok(vm)
    }

    fn func(&self, name: &str) -> Result<Func, Error> {
        self.instance
            .get_func(&self.store, name)
            .ok_or_else(|| Error::new(format!("no export {name}")))
    }

    /// Calls an export with i32 arguments; its i32 result, if any.
    fn call(&mut self, name: &str, args: &[i32]) -> Result<Option<i32>, Error> {
        let f = self.func(name)?;
        let args: Vec<Val> = args.iter().map(|a| Val::I32(*a)).collect();
        let mut out = vec![Val::I32(0); f.ty(&self.store).results().len()];
        f.call(&mut self.store, &args, &mut out)?;
        Ok(match out.first() {
            Some(Val::I32(v)) => Some(*v),
            _ => None,
        })
    }

    fn fuel(&self) -> Result<u64, Error> {
        self.store.get_fuel()
    }

    #[cfg(test)]
    /// The fuel one `malloc` of `size` bytes burns in the module (through
    /// proxy-wasm's allocation export, as the host hands it data).
    pub fn allocation(&mut self, size: i32) -> Result<u64, Error> {
        let before = self.fuel()?;
        self.call("proxy_on_memory_allocate", &[size])?;
        Ok(before - self.fuel()?)
    }

    /// Moves the clock.
    pub fn advance(&mut self, ns: u64) {
        self.store.data_mut().now_ns += ns;
    }

    /// The root's tick, and every call it leads to answered.
    pub fn tick(&mut self) -> Result<(), Error> {
        self.call("proxy_on_tick", &[ROOT])?;
        self.settle()?;
        Ok(())
    }

    /// Turns the worker's loop until nothing is left to do: woken queues
    /// delivered, dispatched calls answered. The lease calls answered.
    fn settle(&mut self) -> Result<u64, Error> {
        let mut answered = 0;
        loop {
            let woken = std::mem::take(&mut self.store.data_mut().woken);
            let calls = std::mem::take(&mut self.store.data_mut().calls);
            if woken.is_empty() && calls.is_empty() {
                return Ok(answered);
            }
            for queue in woken {
                let queue = i32::try_from(queue).unwrap_or(0);
                self.call("proxy_on_queue_ready", &[ROOT, queue])?;
            }
            for call in calls {
                self.answer(&call)?;
                answered += u64::from(call.header(":path") == Some(LEASE_PATH));
            }
        }
    }

    /// The agent's answer to one call.
    fn answer(&mut self, call: &Call) -> Result<(), Error> {
        let path = call.header(":path").unwrap_or_default();
        let body = match path {
            SYNC_PATH => serde_json::to_vec(&SyncResponse {
                v: WIRE_VERSION,
                version: self
                    .agent
                    .rules
                    .as_ref()
                    .map(|r| r.version().to_string())
                    .unwrap_or_default(),
                rules: None,
                live_nodes: Some(1),
            }),
            RULES_PATH => Ok(self
                .agent
                .rules
                .as_ref()
                .and_then(lines::encode)
                .unwrap_or_default()),
            LEASE_PATH => {
                let asked: LeaseRequest =
                    serde_json::from_slice(&call.body).map_err(|e| Error::new(e.to_string()))?;
                let items = asked
                    .items
                    .iter()
                    .map(|item| match self.agent.deny {
                        true => LeaseAnswer::Deny {
                            retry_after_ms: 60_000,
                            local: false,
                            from: None,
                        },
                        false => LeaseAnswer::Grant {
                            tokens: self.agent.grant.max(item.cost),
                            ttl_ms: self.agent.ttl_ms,
                            remaining: self.agent.grant,
                            reset_ms: 1_000,
                            local: false,
                            from: None,
                            next_ask_ms: None,
                        },
                    })
                    .collect();
                serde_json::to_vec(&LeaseResponse {
                    v: WIRE_VERSION,
                    items,
                })
            }
            DECISIONS_PATH => Ok(Vec::new()),
            other => return Err(Error::new(format!("a call to {other}"))),
        }
        .map_err(|e| Error::new(e.to_string()))?;
        let size = i32::try_from(body.len()).unwrap_or(i32::MAX);
        self.store.data_mut().call_response = (vec![(":status".into(), "200".into())], body);
        let token = i32::try_from(call.token).unwrap_or(0);
        self.call("proxy_on_http_call_response", &[ROOT, token, 1, size, 0])?;
        Ok(())
    }

    /// One request with `headers`, from its context's creation to its
    /// deletion, answered by the upstream with a 200; what it burned.
    pub fn request(&mut self, headers: &[(&str, &str)]) -> Result<Burned, Error> {
        let ctx = self.next_context;
        self.next_context += 1;
        {
            let state = self.store.data_mut();
            state.request_headers = headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            state.response_headers = vec![(":status".into(), "200".into())];
            state.local_reply = None;
            state.tally.clear();
        }
        let n = i32::try_from(headers.len()).unwrap_or(0);
        let start = self.fuel()?;
        self.store.data_mut().checkpoints.clear();
        self.last_start = start;
        self.call("proxy_on_context_create", &[ctx, ROOT])?;
        self.call("proxy_on_request_headers", &[ctx, n, 1])?;
        let agent_calls = self.settle()?;
        let after_request = self.fuel()?;
        self.mark("(rest of the request headers)", after_request);
        let replied = self.store.data().local_reply;
        if replied.is_none() {
            self.call("proxy_on_response_headers", &[ctx, 1, 0])?;
        }
        let after_response = self.fuel()?;
        self.mark("response headers", after_response);
        self.call("proxy_on_log", &[ctx])?;
        self.call("proxy_on_done", &[ctx])?;
        self.call("proxy_on_delete", &[ctx])?;
        let end = self.fuel()?;
        self.mark("log, done, delete", end);
        Ok(Burned {
            request: start - after_request,
            response: after_request - after_response,
            end: after_response - end,
            host_calls: self.store.data().tally.values().sum(),
            agent_calls,
            replied,
        })
    }

    /// Marks the end of one of a request's callbacks among its checkpoints.
    fn mark(&mut self, label: &str, fuel: u64) {
        self.store
            .data_mut()
            .checkpoints
            .push((label.to_string(), fuel));
    }

    /// The last request's instructions up to each checkpoint the module
    /// marked (a `cp:<label>` log at critical level), then by callback.
    pub fn checkpoints(&self) -> Vec<(String, u64)> {
        let mut before = self.last_start;
        let mut out = Vec::new();
        for (label, fuel) in &self.store.data().checkpoints {
            out.push((label.clone(), before.saturating_sub(*fuel)));
            before = *fuel;
        }
        out
    }

    /// Host calls of the last request, by name.
    pub fn tally(&self) -> &std::collections::BTreeMap<String, u64> {
        &self.store.data().tally
    }

    /// The module's linear memory now, in bytes.
    pub fn linear_memory(&self) -> Result<usize, Error> {
        let memory = self
            .instance
            .get_memory(&self.store, "memory")
            .ok_or_else(|| Error::new("no memory export"))?;
        Ok(memory.data(&self.store).len())
    }

    /// The shared-data entries whose key starts with `prefix`: how many, and
    /// the bytes of their keys and values.
    pub fn shared_bytes(&self, prefix: &str) -> (usize, usize) {
        self.store.data().shared_bytes(prefix)
    }

    /// What the module logged at warning or above.
    pub fn warnings(&self) -> &[String] {
        &self.store.data().warnings
    }
}
