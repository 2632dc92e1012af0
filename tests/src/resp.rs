//! Just enough of the Redis protocol (RESP2) to set up and inspect test servers.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A Redis reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    /// `None` is the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `None` is the null array.
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// A simple or bulk string reply as text.
    pub fn text(&self) -> Option<String> {
        match self {
            Resp::Simple(s) => Some(s.clone()),
            Resp::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// Sends one command on a new connection to 127.0.0.1:`port` and reads the reply.
/// `Err` only for I/O and protocol failures; a Redis error reply is `Resp::Error`.
pub fn command(port: u16, args: &[&str]) -> Result<Resp, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| e.to_string())?;
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    stream.write_all(&out).map_err(|e| e.to_string())?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut impl BufRead) -> Result<Resp, String> {
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| e.to_string())?;
    let line = line
        .strip_suffix("\r\n")
        .ok_or_else(|| format!("truncated reply line {line:?}"))?;
    let (kind, rest) = line.split_at_checked(1).ok_or("empty reply line")?;
    let number = || {
        rest.parse::<i64>()
            .map_err(|e| format!("bad length {rest:?}: {e}"))
    };
    match kind {
        "+" => Ok(Resp::Simple(rest.to_string())),
        "-" => Ok(Resp::Error(rest.to_string())),
        ":" => Ok(Resp::Int(number()?)),
        "$" => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Resp::Bulk(None));
            };
            let mut buf = vec![0; len + 2];
            reader.read_exact(&mut buf).map_err(|e| e.to_string())?;
            buf.truncate(len);
            Ok(Resp::Bulk(Some(buf)))
        }
        "*" => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Resp::Array(None));
            };
            let items = (0..len)
                .map(|_| read_reply(reader))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Resp::Array(Some(items)))
        }
        other => Err(format!("unknown reply type {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Resp, String> {
        read_reply(&mut BufReader::new(bytes))
    }

    #[test]
    fn parses_every_reply_type() {
        assert_eq!(parse(b"+PONG\r\n"), Ok(Resp::Simple("PONG".into())));
        assert_eq!(parse(b"-ERR no\r\n"), Ok(Resp::Error("ERR no".into())));
        assert_eq!(parse(b":-3\r\n"), Ok(Resp::Int(-3)));
        assert_eq!(parse(b"$-1\r\n"), Ok(Resp::Bulk(None)));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n"),
            Ok(Resp::Bulk(Some(b"a\r\nb".to_vec())))
        );
        assert_eq!(
            parse(b"*2\r\n:1\r\n$1\r\nx\r\n"),
            Ok(Resp::Array(Some(vec![
                Resp::Int(1),
                Resp::Bulk(Some(b"x".to_vec()))
            ])))
        );
        assert!(parse(b"+PONG").is_err());
    }
}
