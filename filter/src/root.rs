//! The root context: plugin configuration, and the once-a-second sync with the
//! agent that fetches rules (only when their version changed) and reports this
//! VM's decisions. A VM that cannot reach the agent keeps its last good rules.

use std::rc::Rc;

use log::{info, warn};
use meshlimit_core::rules::RulesConfig;
use meshlimit_core::secret::{Secret, SECRET_ENV};
use meshlimit_core::wire::{SyncRequest, SyncResponse, SYNC_PATH, WIRE_VERSION};
use meshlimit_core::RuleSet;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

use crate::config::FilterConfig;
use crate::host::{self, Host, ProxyHost};
use crate::http::Http;
use crate::state::{Shared, RULES_KEY, VM_SEQ_KEY};

/// Tick period until the first rules arrive, so a fresh Envoy limits quickly.
const STARTUP_TICK_MS: u64 = 100;

pub struct Root {
    vm: Shared,
    filter_id: String,
    /// A sync in flight, with the counts it carries (restored if it fails).
    in_flight: Option<(u32, Vec<meshlimit_core::wire::DecisionCount>)>,
    ready_gauge: Option<u32>,
    /// Whether the last sync failed: failures are logged once per outage, not
    /// once per tick.
    sync_failing: bool,
}

impl Root {
    pub fn new() -> Self {
        Self {
            vm: Shared::default(),
            filter_id: String::new(),
            in_flight: None,
            ready_gauge: host::define_gauge("meshlimit.rules_ready_vms"),
            sync_failing: false,
        }
    }

    /// Installs a rule set in this VM (and in shared data for the other VMs).
    /// Called from the root context (the sync's answer, or start-up), never on a
    /// request: requests keep the `Rc` of the set they started with, and the ones
    /// that start after the swap take the new one.
    fn install(&mut self, config: &RulesConfig, publish: bool) -> bool {
        // The VM never serves the rules: no copy of the file is kept beside them.
        match RuleSet::compile_unserved(config) {
            Ok(set) => {
                let first = self.vm.borrow().rules.is_none();
                let changed = self
                    .vm
                    .borrow()
                    .rules
                    .as_ref()
                    .is_none_or(|r| r.version() != set.version());
                if changed {
                    info!("meshlimit: rules version {} installed", set.version());
                }
                if publish {
                    if let Ok(json) = serde_json::to_vec(config) {
                        let _ = ProxyHost.shared_set(RULES_KEY, &json, None);
                    }
                }
                self.vm.borrow_mut().rules = Some(Rc::new(set));
                if first {
                    if let Some(g) = self.ready_gauge {
                        host::increment(g, 1);
                    }
                    host::set_tick_period(self.vm.borrow().config.sync_interval_ms);
                }
                true
            }
            Err(e) => {
                warn!("meshlimit: refusing rules from the agent, keeping the last good set: {e}");
                false
            }
        }
    }

    /// The agent counts the region's live agents; the fail-local bucket is sized
    /// by it instead of the configured `expected_nodes` (kept while the agent is
    /// unreachable, which is when the bucket is used).
    fn set_live_nodes(&mut self, nodes: u32) {
        let current = Rc::clone(&self.vm.borrow().config);
        if current.expected_nodes != nodes {
            info!("meshlimit: {nodes} live nodes share each limit");
            let config = FilterConfig {
                expected_nodes: nodes,
                ..(*current).clone()
            };
            self.vm.borrow_mut().config = Rc::new(config);
        }
    }

    fn next_vm_number() -> u64 {
        for _ in 0..16 {
            let (bytes, cas) = ProxyHost.shared_get(VM_SEQ_KEY);
            let n = bytes
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
                + 1;
            if ProxyHost
                .shared_set(VM_SEQ_KEY, &n.to_le_bytes(), cas)
                .is_ok()
            {
                return n;
            }
        }
        0
    }

    fn sync(&mut self) {
        let (config, version) = {
            let vm = self.vm.borrow();
            (
                Rc::clone(&vm.config),
                vm.rules.as_ref().map(|r| r.version().to_string()),
            )
        };
        let decisions = self.vm.borrow_mut().counts.take_unreported();
        let request = SyncRequest {
            v: WIRE_VERSION,
            filter_id: self.filter_id.clone(),
            rules_version: version,
            decisions,
        };
        let body = serde_json::to_vec(&request).unwrap_or_default();
        match host::dispatch(
            &config.agent_cluster,
            &config.agent_authority,
            config.agent_auth.as_deref(),
            SYNC_PATH,
            &body,
            config.sync_timeout_ms,
        ) {
            Some(token) => self.in_flight = Some((token, request.decisions)),
            None => self.vm.borrow_mut().counts.restore(request.decisions),
        }
    }
}

impl Context for Root {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let Some((token, decisions)) = self.in_flight.take() else {
            return;
        };
        if token != token_id {
            self.in_flight = Some((token, decisions));
            return;
        }
        let (status, body) = host::call_response(body_size);
        let answer = (status == Some(200))
            .then(|| serde_json::from_slice::<SyncResponse>(&body).ok())
            .flatten()
            .filter(|r| r.v == WIRE_VERSION);
        match answer {
            Some(response) => {
                if self.sync_failing {
                    info!("meshlimit: agent reachable again");
                    self.sync_failing = false;
                }
                if let Some(nodes) = response.live_nodes.filter(|n| *n > 0) {
                    self.set_live_nodes(nodes);
                }
                if let Some(rules) = response.rules {
                    self.install(&rules, true);
                }
            }
            None => {
                if !self.sync_failing {
                    warn!("meshlimit: rules sync failed (status {status:?}); keeping the last good rules");
                    self.sync_failing = true;
                }
                self.vm.borrow_mut().counts.restore(decisions);
            }
        }
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let mut config = match FilterConfig::parse(host::plugin_configuration().as_deref()) {
            Ok(c) => c,
            Err(e) => {
                warn!("meshlimit: {e}");
                return false;
            }
        };
        // The secret comes from the VM's environment (Envoy's
        // `vm_config.environment_variables.host_env_keys`). Without one the agent
        // refuses this filter's calls and every rule takes its failure policy.
        match std::env::var(SECRET_ENV).map(|s| Secret::new(s.as_bytes())) {
            Ok(Ok(secret)) => config = config.with_secret(&secret),
            Ok(Err(e)) => warn!("meshlimit: {SECRET_ENV}: {e}; the agent will refuse this filter"),
            Err(_) => warn!("meshlimit: no {SECRET_ENV} in the VM's environment; the agent will refuse this filter"),
        }
        self.vm.borrow_mut().config = Rc::new(config);
        let node = host::property(vec!["node", "id"])
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "envoy".into());
        self.filter_id = format!("{node}/vm{}", Self::next_vm_number());
        // Start with the last good rules any VM on this Envoy had.
        if let (Some(json), _) = ProxyHost.shared_get(RULES_KEY) {
            if let Ok(config) = serde_json::from_slice::<RulesConfig>(&json) {
                self.install(&config, false);
            }
        }
        if self.vm.borrow().rules.is_none() {
            host::set_tick_period(STARTUP_TICK_MS);
        }
        true
    }

    fn on_tick(&mut self) {
        if self.in_flight.is_none() {
            self.sync();
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http::new(Rc::clone(&self.vm))))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
