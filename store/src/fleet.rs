//! The fleet override as the store keeps it: one switch the region's agents
//! share that puts every rule in shadow, or pins the version served before.
//! The agent polls and applies it; the operator's CLI sets it.

use serde::{Deserialize, Serialize};

/// What the override does: every rule in shadow, or the previous version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverrideMode {
    Shadow,
    Pin,
}

impl OverrideMode {
    /// Every mode, for the metric's series.
    pub const ALL: [OverrideMode; 2] = [OverrideMode::Shadow, OverrideMode::Pin];

    /// The `mode` label of `meshlimit_fleet_override`.
    pub fn as_str(self) -> &'static str {
        match self {
            OverrideMode::Shadow => "shadow",
            OverrideMode::Pin => "pin",
        }
    }
}

/// The override as stored: `{"mode":"shadow","set_by":"...","at":unix_secs}`,
/// and for a pin `"version"`, the rules version every agent serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    pub mode: OverrideMode,
    /// Who set it and why (`--reason`), for the agents' logs.
    pub set_by: String,
    /// When it was set, Unix seconds.
    pub at: u64,
    /// The version pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}
