//! One gRPC call: the request read (bounded), decoded and checked, the answer
//! framed with `grpc-status` in the trailers. Every failure is a gRPC status,
//! never a dropped stream.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::WithTrailers;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};

use crate::counter::Counter;
use crate::proto::{self, DecodeError, RateLimitRequest};

pub const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// A response body: the framed message (or nothing), then the trailers.
pub type GrpcBody = WithTrailers<Full<Bytes>, Ready<Option<Result<HeaderMap, Infallible>>>>;

/// A call that ends without a RateLimitResponse.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unknown method {0}")]
    Method(String),
    #[error("reading the request: {0}")]
    Body(String),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl CallError {
    /// The gRPC status code.
    fn status(&self) -> u8 {
        match self {
            CallError::Method(_) => 12,                    // UNIMPLEMENTED
            CallError::Body(_) => 8,                       // RESOURCE_EXHAUSTED
            CallError::Decode(DecodeError::TooLarge) => 8, // RESOURCE_EXHAUSTED
            CallError::Decode(_) => 3,                     // INVALID_ARGUMENT
            CallError::Redis(_) => 14,                     // UNAVAILABLE
        }
    }
}

pub async fn handle(
    req: Request<Incoming>,
    counter: Arc<Counter>,
) -> Result<Response<GrpcBody>, Infallible> {
    let answer = async {
        let (parts, body) = req.into_parts();
        // The prefix and the largest message, and not a byte more.
        let body = Limited::new(body, 5 + proto::MAX_MESSAGE)
            .collect()
            .await
            .map_err(|e| CallError::Body(e.to_string()))?
            .to_bytes();
        let request = parse(parts.uri.path(), &body)?;
        Ok::<_, CallError>(counter.check(&request).await?)
    };
    Ok(match answer.await {
        Ok(code) => reply(proto::frame(&proto::encode_response(code)), 0, None),
        Err(e) => error_reply(&e),
    })
}

/// The request of a ShouldRateLimit call, from its path and body.
pub fn parse(path: &str, body: &[u8]) -> Result<RateLimitRequest, CallError> {
    if path != METHOD {
        return Err(CallError::Method(path.chars().take(200).collect()));
    }
    Ok(proto::decode_request(proto::unframe(body)?)?)
}

pub fn error_reply(e: &CallError) -> Response<GrpcBody> {
    reply(Vec::new(), e.status(), Some(&e.to_string()))
}

/// HTTP 200, `content-type: application/grpc`, `body`, then `grpc-status`
/// (and `grpc-message`) in the trailers.
fn reply(body: Vec<u8>, status: u8, message: Option<&str>) -> Response<GrpcBody> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(u16::from(status)));
    if let Some(value) = message.and_then(|m| HeaderValue::from_str(&grpc_message(m)).ok()) {
        trailers.insert("grpc-message", value);
    }
    let mut response =
        Response::new(Full::new(Bytes::from(body)).with_trailers(ready(Some(Ok(trailers)))));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// `grpc-message` is percent-encoded: every byte outside printable ASCII, and
/// `%`, becomes `%XX`.
fn grpc_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use http_body_util::BodyExt;

    use super::*;

    async fn trailers(e: CallError) -> (HeaderMap, HeaderMap, Bytes) {
        let (parts, body) = error_reply(&e).into_parts();
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap();
        (parts.headers, trailers, collected.to_bytes())
    }

    #[tokio::test]
    async fn bad_input_is_a_grpc_status_in_the_trailers() {
        let cases = [
            (parse("/other.Service/Call", &[]).unwrap_err(), "12"),
            (parse(METHOD, &[0, 0]).unwrap_err(), "3"),
            (parse(METHOD, &[0, 0, 0, 0, 2, 0x0a, 9]).unwrap_err(), "3"),
            (parse(METHOD, &[0, 0xff, 0, 0, 0]).unwrap_err(), "8"),
        ];
        for (e, want) in cases {
            let (headers, trailers, body) = trailers(e).await;
            assert_eq!(headers[CONTENT_TYPE], "application/grpc");
            assert_eq!(trailers["grpc-status"], want);
            assert!(trailers.contains_key("grpc-message"));
            assert!(body.is_empty());
        }
    }

    #[test]
    fn a_good_call_parses() {
        let msg = [0x0a, 1, b'd'];
        let req = parse(METHOD, &proto::frame(&msg)).unwrap();
        assert_eq!(req.domain, "d");
    }

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(grpc_message("a b%é"), "a b%25%C3%A9");
    }

    #[tokio::test]
    async fn an_answer_carries_the_frame_and_status_zero() {
        let frame = proto::frame(&proto::encode_response(proto::Code::Ok));
        let (parts, body) = reply(frame.clone(), 0, None).into_parts();
        let collected = body.collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
        assert_eq!(parts.headers[CONTENT_TYPE], "application/grpc");
        assert_eq!(collected.to_bytes(), frame);
    }
}
