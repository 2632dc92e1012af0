//! Every way the API refuses a request: one variant per failure, each mapped to its
//! status code and answered with core's `ErrorBody`.

use hyper::header::{HeaderValue, ALLOW};
use hyper::{Method, StatusCode};
use meshlimit_core::wire::{ErrorBody, MAX_BODY_BYTES, MAX_LEASE_ITEMS, WIRE_VERSION};

use super::{respond, ApiResponse};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("body larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("cannot read the body: {0}")]
    BodyRead(String),
    #[error("{0}")]
    MalformedJson(String),
    #[error("wire version {0}; this agent speaks version {WIRE_VERSION}")]
    WrongVersion(u32),
    #[error("{0} items; at most {MAX_LEASE_ITEMS} per request")]
    TooManyItems(usize),
    /// A field the JSON shape allows but the protocol does not (cost 0, a key of
    /// another rule, an empty filter id).
    #[error("{0}")]
    InvalidField(String),
    #[error("method {method} not allowed here")]
    MethodNotAllowed {
        method: String,
        allowed: &'static [Method],
    },
    #[error("no route for {0}")]
    NotFound(String),
    #[error("the filter API needs `authorization: Bearer <token>` (from the deployment's secret)")]
    Unauthorized,
    #[error("wrong credentials for the filter API")]
    Forbidden,
    /// An operator view asked with another credential (the filters' token too).
    #[error("this route is for operators: it takes the operator token, not the filters'")]
    OperatorOnly,
    #[error(
        "this route is for operators, and this agent has no operator token (--operator-token)"
    )]
    NoOperatorToken,
    #[error("no valid rules loaded")]
    NoRules,
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyRead(_)
            | ApiError::MalformedJson(_)
            | ApiError::WrongVersion(_)
            | ApiError::TooManyItems(_)
            | ApiError::InvalidField(_) => StatusCode::BAD_REQUEST,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden | ApiError::OperatorOnly | ApiError::NoOperatorToken => {
                StatusCode::FORBIDDEN
            }
            ApiError::NoRules => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `error` field of the body: a fixed word per variant.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            ApiError::TooLarge => "body_too_large",
            ApiError::BodyRead(_) => "body_read",
            ApiError::MalformedJson(_) => "malformed_json",
            ApiError::WrongVersion(_) => "wrong_version",
            ApiError::TooManyItems(_) => "too_many_items",
            ApiError::InvalidField(_) => "invalid_field",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::NotFound(_) => "not_found",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden | ApiError::OperatorOnly | ApiError::NoOperatorToken => "forbidden",
            ApiError::NoRules => "no_rules",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The `reason` label of `meshlimit_bad_requests_total`, for the caller's
    /// mistakes (4xx) only.
    pub(crate) fn bad_request_reason(&self) -> Option<&'static str> {
        self.status().is_client_error().then(|| self.code())
    }

    pub(crate) fn into_response(self) -> ApiResponse {
        let body = ErrorBody {
            error: self.code().to_string(),
            detail: self.to_string(),
        };
        // Serialising two strings cannot fail; the fallback only avoids a panic path.
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut resp = respond(self.status(), "application/json", bytes);
        if let ApiError::MethodNotAllowed { allowed, .. } = &self {
            let list: Vec<&str> = allowed.iter().map(Method::as_str).collect();
            if let Ok(v) = HeaderValue::from_str(&list.join(", ")) {
                resp.headers_mut().insert(ALLOW, v);
            }
        }
        resp
    }
}
