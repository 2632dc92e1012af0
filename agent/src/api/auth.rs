//! Who may use the agent's API. Other pods can reach the agent's port, so two
//! credentials guard it, each for its own routes:
//!
//! - the filters' bearer token, derived from the deployment's secret, for what
//!   the node's filters do: take tokens, report decisions and syncs, read
//!   rules. Every meshed namespace holds that secret (each Envoy's Wasm VM
//!   reads it from its environment), so this token says "one of the mesh's
//!   filters", nothing more;
//! - the operator token, a random value of its own (not derived from the
//!   secret, which every namespace could then derive too), given to the agent
//!   alone (`--operator-token`, from a Secret only the agent's namespace
//!   holds), for the operator views: `GET /v1/explain` and `GET /v1/hot`. An
//!   agent given none answers them 403 to everyone.
//!
//! Neither token opens the other's routes. `/metrics` and the probes stay
//! open: they change nothing and name no customer key in clear.

use hyper::http::request::Parts;
use meshlimit_core::secret::{token_matches, Secret, AUTH_HEADER, MIN_SECRET_LEN};

use super::ApiError;
use crate::config::OperatorTokenError;

/// The credentials check of both kinds of routes.
#[derive(Clone)]
pub struct Auth {
    filter: String,
    operator: Option<String>,
}

impl Auth {
    /// The filters' routes only: the operator views refuse everyone.
    pub fn new(secret: &Secret) -> Auth {
        Auth {
            filter: secret.agent_token(),
            operator: None,
        }
    }

    /// The filters' routes, and the operator views for `operator` (surrounding
    /// whitespace, a mounted file's newline, is not part of it). Refused when
    /// short, or when it is the secret or the token the filters hold.
    pub fn with_operator(secret: &Secret, operator: &str) -> Result<Auth, OperatorTokenError> {
        let operator = operator.trim();
        if operator.len() < MIN_SECRET_LEN {
            return Err(OperatorTokenError::TooShort(operator.len()));
        }
        let auth = Auth::new(secret);
        let secret_itself = Secret::new(operator.as_bytes()).is_ok_and(|s| s == *secret);
        if secret_itself || token_matches(operator.as_bytes(), &auth.filter) {
            return Err(OperatorTokenError::SharedWithFilters);
        }
        Ok(Auth {
            operator: Some(operator.to_string()),
            ..auth
        })
    }

    /// The filters' routes: 401 without credentials, 403 with wrong ones.
    pub(super) fn check(&self, parts: &Parts) -> Result<(), ApiError> {
        if token_matches(presented(parts)?, &self.filter) {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }

    /// The operator views: 401 without credentials, 403 with any other token
    /// (the filters' included), or when this agent has no operator token.
    pub(super) fn check_operator(&self, parts: &Parts) -> Result<(), ApiError> {
        let presented = presented(parts)?;
        match &self.operator {
            Some(token) if token_matches(presented, token) => Ok(()),
            Some(_) => Err(ApiError::OperatorOnly),
            None => Err(ApiError::NoOperatorToken),
        }
    }
}

/// The bearer token presented (compared in constant time by the caller).
fn presented(parts: &Parts) -> Result<&[u8], ApiError> {
    let value = parts
        .headers
        .get(AUTH_HEADER)
        .ok_or(ApiError::Unauthorized)?;
    Ok(value.as_bytes().strip_prefix(b"Bearer ").unwrap_or(b""))
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(<redacted>)")
    }
}
