//! Who may use the filter API. Other pods can reach the agent's port, so taking
//! tokens, reporting decisions and reading rules need the bearer token derived
//! from the deployment's secret, which only the node's Envoys hold (in their Wasm
//! VM's environment). `/metrics` and the probes stay open: they change nothing and
//! name no customer key in clear.

use hyper::http::request::Parts;
use meshlimit_core::secret::{token_matches, Secret, AUTH_HEADER};

use super::ApiError;

/// The filter API's credentials check.
#[derive(Clone)]
pub struct Auth {
    token: String,
}

impl Auth {
    pub fn new(secret: &Secret) -> Auth {
        Auth {
            token: secret.agent_token(),
        }
    }

    /// 401 without credentials, 403 with wrong ones; compared in constant time.
    pub(super) fn check(&self, parts: &Parts) -> Result<(), ApiError> {
        let Some(value) = parts.headers.get(AUTH_HEADER) else {
            return Err(ApiError::Unauthorized);
        };
        let presented = value.as_bytes().strip_prefix(b"Bearer ").unwrap_or(b"");
        if token_matches(presented, &self.token) {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(<redacted>)")
    }
}
