//! A minimal HTTP/1.1 client for timing: one keep-alive connection per host per thread,
//! `TCP_NODELAY`, the request written in one `write`, `Content-Length` and chunked bodies decoded
//! as they arrive so a stream's first content is timed when its bytes land, not when the body ends.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// `http://host:port/prefix` split up (no TLS: loopback benchmarks only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// Path without a trailing slash ("" for the root).
    pub path: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, String> {
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| format!("{s}: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse::<u16>().map_err(|_| format!("{s}: bad port"))?),
            None => (authority, 80),
        };
        if host.is_empty() {
            return Err(format!("{s}: no host"));
        }
        Ok(Url {
            host: host.to_string(),
            port,
            path: path.trim_end_matches('/').to_string(),
        })
    }

    /// This URL with `suffix` appended to its path.
    pub fn join(&self, suffix: &str) -> Url {
        Url {
            path: format!("{}{suffix}", self.path),
            ..self.clone()
        }
    }

    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path)
    }
}

/// One request to make, again and again.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: &'static str,
    pub url: Url,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Watch the body for the first SSE `data:` event with non-empty content.
    pub sse: bool,
}

impl Call {
    pub fn post_json(url: Url, headers: Vec<(String, String)>, body: &serde_json::Value, sse: bool) -> Call {
        Call {
            method: "POST",
            url,
            headers,
            body: body.to_string().into_bytes(),
            sse,
        }
    }

    fn head(&self) -> Vec<u8> {
        let path = if self.url.path.is_empty() { "/" } else { &self.url.path };
        let mut h = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\n",
            self.method,
            path,
            self.url.authority()
        );
        for (k, v) in &self.headers {
            h.push_str(k);
            h.push_str(": ");
            h.push_str(v);
            h.push_str("\r\n");
        }
        if self.method != "GET" || !self.body.is_empty() {
            h.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        h.push_str("\r\n");
        let mut out = h.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// What one request took.
#[derive(Debug, Clone)]
pub struct Timing {
    pub status: u16,
    /// Until the whole body was read, ms.
    pub total_ms: f64,
    /// Until the first `data:` event with non-empty content (SSE calls only), ms.
    pub first_content_ms: Option<f64>,
    /// The `x-generation-id` response header (Switchyard names every request).
    pub generation_id: Option<String>,
    pub body: Vec<u8>,
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Start of unread data in `buf`.
    pos: usize,
}

impl Conn {
    fn open(url: &Url, timeout: Duration) -> io::Result<Conn> {
        let addr = (url.host.as_str(), url.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::other("no address"))?;
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(64 * 1024),
            pos: 0,
        })
    }

    /// Reads more bytes into the buffer; Ok(0) at EOF.
    fn fill(&mut self) -> io::Result<usize> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    fn unread(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// A line ending in CRLF (without it).
    fn line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.unread().windows(2).position(|w| w == b"\r\n") {
                let line = self.unread()[..i].to_vec();
                self.pos += i + 2;
                return Ok(line);
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed mid-line"));
            }
        }
    }

    /// Up to `max` body bytes (at least one unless EOF).
    fn take(&mut self, max: usize) -> io::Result<Vec<u8>> {
        if self.unread().is_empty() && self.fill()? == 0 {
            return Ok(Vec::new());
        }
        let n = max.min(self.unread().len());
        let out = self.unread()[..n].to_vec();
        self.pos += n;
        Ok(out)
    }
}

/// Finds the first SSE `data:` event whose `choices[0].delta.content` is a non-empty string.
#[derive(Default)]
struct ContentWatch {
    line: Vec<u8>,
    found: bool,
}

impl ContentWatch {
    fn push(&mut self, bytes: &[u8]) -> bool {
        if self.found {
            return true;
        }
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                if has_content(&line) {
                    self.found = true;
                    return true;
                }
            } else {
                self.line.push(b);
            }
        }
        false
    }
}

fn has_content(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(data) = line.strip_prefix(b"data:") else {
        return false;
    };
    let data = data.strip_prefix(b" ").unwrap_or(data);
    if data == b"[DONE]" {
        return false;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return false;
    };
    v["choices"][0]["delta"]["content"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
}

/// Keep-alive connections of one thread, by host:port.
pub struct Client {
    conns: HashMap<String, Conn>,
    timeout: Duration,
}

impl Client {
    pub fn new(timeout: Duration) -> Client {
        Client {
            conns: HashMap::new(),
            timeout,
        }
    }

    /// Sends `call` and reads the whole response, timing it. A kept connection that turns out to
    /// be closed is reopened once (and the clock restarted).
    #[allow(clippy::disallowed_methods)] // native benchmark: real clocks
    pub fn send(&mut self, call: &Call) -> io::Result<Timing> {
        let key = call.url.authority();
        let request = call.head();
        for attempt in 0..2 {
            let reused = self.conns.contains_key(&key);
            if !reused {
                self.conns.insert(key.clone(), Conn::open(&call.url, self.timeout)?);
            }
            let Some(conn) = self.conns.get_mut(&key) else {
                return Err(io::Error::other("no connection"));
            };
            let start = Instant::now();
            let result = exchange(conn, &request, call.sse, start);
            match result {
                Ok((timing, keep)) => {
                    if !keep {
                        self.conns.remove(&key);
                    }
                    return Ok(timing);
                }
                Err(Failure::BeforeResponse(e)) if reused && attempt == 0 => {
                    self.conns.remove(&key);
                    let _ = e;
                }
                Err(Failure::BeforeResponse(e)) | Err(Failure::During(e)) => {
                    self.conns.remove(&key);
                    return Err(e);
                }
            }
        }
        Err(io::Error::other("connection closed twice"))
    }
}

enum Failure {
    /// Nothing of the response arrived (a stale keep-alive connection, most likely).
    BeforeResponse(io::Error),
    During(io::Error),
}

#[allow(clippy::disallowed_methods)] // native benchmark: real clocks
fn exchange(conn: &mut Conn, request: &[u8], sse: bool, start: Instant) -> Result<(Timing, bool), Failure> {
    conn.stream.write_all(request).map_err(Failure::BeforeResponse)?;
    if conn.unread().is_empty() {
        match conn.fill() {
            Ok(0) => {
                return Err(Failure::BeforeResponse(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before the response",
                )))
            }
            Ok(_) => {}
            Err(e) => return Err(Failure::BeforeResponse(e)),
        }
    }
    let during = Failure::During;
    let status_line = conn.line().map_err(during)?;
    let status_line = String::from_utf8_lossy(&status_line).into_owned();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| Failure::During(io::Error::other(format!("bad status line {status_line:?}"))))?;
    let mut headers = Vec::new();
    loop {
        let line = conn.line().map_err(Failure::During)?;
        if line.is_empty() {
            break;
        }
        let line = String::from_utf8_lossy(&line).into_owned();
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let chunked = get("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let length = get("content-length").and_then(|v| v.parse::<usize>().ok());
    let mut keep = !get("connection").is_some_and(|v| v.contains("close"));
    let mut watch = ContentWatch::default();
    let mut first_content_ms = None;
    let mut body = Vec::new();
    let mut on_bytes = |bytes: &[u8], body: &mut Vec<u8>| {
        if sse && first_content_ms.is_none() && watch.push(bytes) {
            first_content_ms = Some(start.elapsed().as_secs_f64() * 1e3);
        }
        body.extend_from_slice(bytes);
    };
    if chunked {
        loop {
            let size_line = conn.line().map_err(Failure::During)?;
            let size_text = String::from_utf8_lossy(&size_line);
            let size_hex = size_text.split(';').next().unwrap_or("").trim();
            let mut size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| Failure::During(io::Error::other(format!("bad chunk size {size_text:?}"))))?;
            if size == 0 {
                // Trailers, then the empty line.
                while !conn.line().map_err(Failure::During)?.is_empty() {}
                break;
            }
            while size > 0 {
                let part = conn.take(size).map_err(Failure::During)?;
                if part.is_empty() {
                    return Err(Failure::During(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed mid-chunk",
                    )));
                }
                size -= part.len();
                on_bytes(&part, &mut body);
            }
            conn.line().map_err(Failure::During)?;
        }
    } else if let Some(mut left) = length {
        while left > 0 {
            let part = conn.take(left).map_err(Failure::During)?;
            if part.is_empty() {
                return Err(Failure::During(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed mid-body",
                )));
            }
            left -= part.len();
            on_bytes(&part, &mut body);
        }
    } else {
        // No length: the body runs to EOF.
        loop {
            let part = conn.take(usize::MAX).map_err(Failure::During)?;
            if part.is_empty() {
                break;
            }
            on_bytes(&part, &mut body);
        }
        keep = false;
    }
    let total_ms = start.elapsed().as_secs_f64() * 1e3;
    let generation_id = headers
        .iter()
        .find(|(k, _)| k == "x-generation-id")
        .map(|(_, v)| v.clone());
    Ok((
        Timing {
            status,
            total_ms,
            first_content_ms,
            generation_id,
            body,
        },
        keep,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = Url::parse("http://127.0.0.1:8787/v1/").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("127.0.0.1", 8787, "/v1"));
        assert_eq!(
            u.join("/chat/completions").to_string(),
            "http://127.0.0.1:8787/v1/chat/completions"
        );
        assert!(Url::parse("https://x").is_err());
    }

    #[test]
    fn finds_first_content() {
        let mut w = ContentWatch::default();
        assert!(
            !w.push(b": keep-alive\n\ndata: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
        );
        assert!(!w.push(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel"));
        assert!(w.push(b"lo\"}}]}\n\n"));
    }
}
