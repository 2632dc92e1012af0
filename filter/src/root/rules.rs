//! The root context's rules: fetching a new version from the agent, loading it
//! a slice at a time ([`crate::reload`]), swapping it in, and the tick that
//! paces the work.

use std::rc::Rc;

use log::{info, warn};
use meshlimit_core::rules::lines::RULES_LINES_TYPE;
use meshlimit_core::wire::RULES_PATH;
use meshlimit_core::RuleSet;

use super::{Root, STARTUP_TICK_MS};
use crate::config::millis;
use crate::host::{AgentCall, AgentRequest, Proxy};
use crate::reload::{Loading, Slice, LOAD_TICK_MS, SLICE_NS};
use crate::state::RULES_KEY;

impl<H: Proxy + 'static> Root<H> {
    /// Installs a rule set in this VM, and hands its `lines` to the VMs that
    /// start later through shared data. Called from the root context (a load's
    /// last slice, or start-up), never on a request: requests keep the `Rc` of
    /// the set they started with, and the ones that start after the swap take
    /// the new one.
    pub(super) fn install(&mut self, set: RuleSet, lines: Option<&[u8]>) {
        let first = self.vm.borrow().rules.is_none();
        info!("meshlimit: rules version {} installed", set.version());
        if let Some(lines) = lines {
            let _ = self.host.shared_set(RULES_KEY, lines, None);
        }
        let old = self.vm.borrow_mut().rules.replace(Rc::new(set));
        if let Some(old) = old {
            self.retired.push(old);
        }
        if first {
            if let Some(g) = self.ready_gauge {
                self.host.increment(g, 1);
            }
        } else if self.in_flight.is_none() {
            // Report the new version now, not at the next interval: the agent's
            // propagation figures then say when this VM started running it.
            self.sync();
        }
    }

    /// Starts loading the rules the agent answered with: at once when this VM
    /// has none yet, a slice a tick otherwise.
    pub(super) fn load(&mut self, lines: Vec<u8>) {
        let mut loading = match Loading::start(lines) {
            Ok(l) => l,
            Err(e) => {
                warn!("meshlimit: refusing rules from the agent, keeping the last good set: {e}");
                return;
            }
        };
        if self.vm.borrow().rules.is_some() {
            self.loading = Some(loading);
            self.set_tick();
            return;
        }
        match loading.slice(&*self.host, u64::MAX) {
            Slice::Done(set, lines) => self.install(*set, Some(&lines)),
            Slice::Failed(e) => {
                warn!("meshlimit: refusing rules from the agent, keeping the last good set: {e}")
            }
            Slice::Working => {}
        }
        self.set_tick();
    }

    /// One slice of the load in progress; the set is swapped in when done.
    pub(super) fn load_slice(&mut self) {
        let Some(loading) = self.loading.as_mut() else {
            return;
        };
        match loading.slice(&*self.host, SLICE_NS) {
            Slice::Working => return,
            Slice::Done(set, lines) => self.install(*set, Some(&lines)),
            Slice::Failed(e) => {
                warn!("meshlimit: refusing rules from the agent, keeping the last good set: {e}")
            }
        }
        self.loading = None;
        self.set_tick();
    }

    /// The tick: every millisecond while rules are being loaded or a replaced
    /// set can be freed (a slice of the work each); otherwise fast until the
    /// first rules arrive, so a fresh Envoy limits quickly, then the sync
    /// interval.
    pub(super) fn set_tick(&self) {
        let vm = self.vm.borrow();
        self.host
            .set_tick_period(if self.loading.is_some() || self.retired.can_shed() {
                LOAD_TICK_MS
            } else if vm.rules.is_some() {
                millis(vm.config.sync_interval)
            } else {
                STARTUP_TICK_MS
            });
    }

    /// Asks the agent for its rules, as lines, unless that version is already
    /// here, on its way or being compiled.
    pub(super) fn fetch_rules(&mut self, version: &str) {
        let here = self
            .vm
            .borrow()
            .rules
            .as_ref()
            .map(|r| r.version() == version);
        let loading = self.loading.as_ref().map(|l| l.version() == version);
        if version.is_empty()
            || here == Some(true)
            || loading == Some(true)
            || self.rules_call.is_some()
        {
            return;
        }
        let config = Rc::clone(&self.vm.borrow().config);
        self.rules_call = self.host.dispatch(AgentCall::to_agent(
            &config,
            RULES_PATH,
            AgentRequest::Get {
                accept: RULES_LINES_TYPE,
            },
            config.sync_timeout,
        ));
    }
}
