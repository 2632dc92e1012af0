//! A blocking HTTP/1.1 client for tests: every status is an answer, not an error.

use std::io::Read;
use std::sync::OnceLock;
use std::time::Duration;

/// An HTTP response, whatever its status.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names in lower case, in the order received; repeated headers repeat.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name` (any case).
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The body parsed as JSON; panics with the body if it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// `GET url` with extra request headers. Panics only if no HTTP answer came at all
/// (connection refused, timeout): use [`try_request`] to expect that.
pub fn get(url: &str, headers: &[(&str, &str)]) -> Response {
    request("GET", url, headers, None)
}

/// `POST url` with a body.
pub fn post(url: &str, headers: &[(&str, &str)], body: &str) -> Response {
    request("POST", url, headers, Some(body.as_bytes()))
}

/// Any method; panics only when no HTTP answer came.
pub fn request(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Response {
    try_request(method, url, headers, body).unwrap_or_else(|e| panic!("{method} {url}: {e}"))
}

/// Any method; `Err` only when no HTTP answer came (the reason as text).
pub fn try_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Response, String> {
    let mut req = client().request(method, url);
    for (name, value) in headers {
        req = req.set(name, value);
    }
    let result = match body {
        Some(bytes) => req.send_bytes(bytes),
        None => req.call(),
    };
    match result {
        Ok(resp) | Err(ureq::Error::Status(_, resp)) => Ok(convert(resp)),
        Err(ureq::Error::Transport(e)) => Err(e.to_string()),
    }
}

fn convert(resp: ureq::Response) -> Response {
    let status = resp.status();
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for name in resp.headers_names() {
        let name = name.to_ascii_lowercase();
        if seen.contains(&name) {
            continue;
        }
        for value in resp.all(&name) {
            headers.push((name.clone(), value.to_string()));
        }
        seen.push(name);
    }
    let mut bytes = Vec::new();
    // A body cut short (the peer closed early) is still worth showing.
    let _ = resp.into_reader().take(64 << 20).read_to_end(&mut bytes);
    Response {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Sends `bytes` as they are to 127.0.0.1:`port` (a request a client library
/// would refuse or re-spell) and returns the status line's code (0: no answer).
pub fn raw_status(port: u16, bytes: &[u8]) -> u16 {
    use std::io::Write;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// One client for the whole test binary. No connection pool: a test that restarts
/// a server must not get a stale pooled connection, and each request is
/// independent of the one before. No redirects followed.
fn client() -> &'static ureq::Agent {
    static CLIENT: OnceLock<ureq::Agent> = OnceLock::new();
    CLIENT.get_or_init(|| {
        ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(2))
            .timeout(Duration::from_secs(15))
            .max_idle_connections(0)
            .redirects(0)
            .build()
    })
}
