//! One keep-alive HTTP/1.1 connection, one request at a time. Bodies must carry
//! a `content-length` (Envoy's answers here all do); anything else is an error and
//! the connection is dropped, never guessed at.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::options::Target;

/// Headers a response may carry before it is refused.
const MAX_HEADERS: usize = 64;

/// What a response said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub code: u16,
    /// The server asked to close the connection.
    pub close: bool,
}

pub struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Connection {
    pub async fn open(target: &Target, timeout: Duration) -> io::Result<Connection> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(target.addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Sends `request` and reads its whole response.
    pub async fn exchange(&mut self, request: &[u8]) -> io::Result<Status> {
        self.stream.write_all(request).await?;
        loop {
            if let Some((status, len)) = parse(&self.buf)? {
                if self.buf.len() >= len {
                    self.buf.drain(..len);
                    return Ok(status);
                }
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed mid-response",
                ));
            }
        }
    }
}

/// The status and the whole response's length, once the head is complete.
fn parse(buf: &[u8]) -> io::Result<Option<(Status, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    };
    let mut body: Option<usize> = None;
    let mut close = false;
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or_default().trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            body = value.parse().ok();
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "transfer-encoding is not supported",
            ));
        }
    }
    let code = resp.code.unwrap_or(0);
    // 1xx, 204 and 304 have no body.
    let body = match code {
        100..=199 | 204 | 304 => 0,
        _ => body.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "response without content-length",
            )
        })?,
    };
    Ok(Some((Status { code, close }, head + body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_complete_only_with_its_body() -> io::Result<()> {
        let full = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n";
        let parsed = parse(full)?;
        assert_eq!(parsed.map(|(s, n)| (s.code, n)), Some((200, full.len())));
        assert_eq!(parse(&full[..10])?, None);
        let close =
            parse(b"HTTP/1.1 429 Too Many\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")?;
        assert_eq!(close.map(|(s, _)| s.close), Some(true));
        assert!(parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").is_err());
        Ok(())
    }
}
