//! Minimal HTTP/1.1: reading requests (Content-Length and chunked bodies,
//! case-insensitive headers) and writing responses (fixed-length bodies and
//! chunked bodies, one chunk per write, flushed at once).
//!
//! Nothing here panics on bad input or a broken socket: every failure is an
//! `Err` the connection loop turns into closing that one connection.

use std::io::{self, BufRead, Read, Write};

/// Longest request line or header line accepted.
pub const MAX_LINE: u64 = 64 * 1024;
/// Most header lines accepted in one request.
pub const MAX_HEADERS: usize = 256;
/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024 * 1024;

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// Request target as sent (path plus optional query).
    pub target: String,
    pub version: String,
    /// Header names lower-cased, values trimmed, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// First value of a header (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The target without its query string.
    pub fn path(&self) -> &str {
        match self.target.find('?') {
            Some(i) => &self.target[..i],
            None => &self.target,
        }
    }

    /// The query string (after `?`, empty when there is none), as sent.
    pub fn query(&self) -> &str {
        self.target.split_once('?').map_or("", |(_, q)| q)
    }

    /// Every value of a query parameter, percent-decoded, in order.
    pub fn query_values(&self, name: &str) -> Vec<String> {
        self.query()
            .split('&')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(k) == name.as_bytes()).then(|| String::from_utf8_lossy(&percent_decode(v)).into_owned())
            })
            .collect()
    }

    /// True when the connection must be closed after this request.
    pub fn wants_close(&self) -> bool {
        let conn = self.header("connection").map(|v| v.to_ascii_lowercase());
        let has = |tok: &str| {
            conn.as_deref()
                .map(|c| c.split(',').any(|t| t.trim() == tok))
                .unwrap_or(false)
        };
        if self.version.eq_ignore_ascii_case("HTTP/1.0") {
            !has("keep-alive")
        } else {
            has("close")
        }
    }
}

/// A whole JSON answer decided before anything is written: status, extra headers, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonReply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

impl JsonReply {
    pub fn new(status: u16, body: String) -> JsonReply {
        JsonReply {
            status,
            headers: Vec::new(),
            body,
        }
    }

    /// The same answer with one more header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> JsonReply {
        self.headers.push((name, value.into()));
        self
    }
}

/// Decodes `%XX` escapes (a `%` not followed by two hex digits stays as it is; `+` is not a
/// space).
pub fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i + 1..i + 3) {
            Some(hex) if bytes[i] == b'%' && hex.iter().all(u8::is_ascii_hexdigit) => std::str::from_utf8(hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok()),
            _ => None,
        };
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

/// Why a request could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The socket failed (or closed in the middle of a request).
    Io(io::Error),
    /// The bytes are not a request we understand; answer 400 and close.
    Bad(String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

fn bad(msg: impl Into<String>) -> ReadError {
    ReadError::Bad(msg.into())
}

/// Reads one line (up to `MAX_LINE` bytes) without its CRLF / LF.
/// `Ok(None)` means end of stream before any byte.
fn read_line<R: BufRead>(r: &mut R) -> Result<Option<String>, ReadError> {
    let mut buf = Vec::new();
    let n = (&mut *r).take(MAX_LINE).read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        if n as u64 >= MAX_LINE {
            return Err(bad("line too long"));
        }
        return Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of a line",
        )));
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf).map(Some).map_err(|_| bad("line is not UTF-8"))
}

fn read_line_required<R: BufRead>(r: &mut R) -> Result<String, ReadError> {
    match read_line(r)? {
        Some(l) => Ok(l),
        None => Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of a request",
        ))),
    }
}

/// Reads the next request. `Ok(None)`: the peer closed the connection
/// cleanly between requests.
pub fn read_request<R: BufRead>(r: &mut R) -> Result<Option<Request>, ReadError> {
    // Tolerate empty lines before the request line (RFC 9112 §2.2).
    let line = loop {
        match read_line(r)? {
            None => return Ok(None),
            Some(l) if l.is_empty() => continue,
            Some(l) => break l,
        }
    };
    let mut parts = line.split_whitespace();
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) => (m.to_string(), t.to_string(), v.to_string()),
        _ => return Err(bad(format!("bad request line: {line:?}"))),
    };
    if !version.starts_with("HTTP/1.") {
        return Err(bad(format!("unsupported version {version}")));
    }

    let headers = read_header_block(r)?;
    let mut req = Request {
        method,
        target,
        version,
        headers,
        body: Vec::new(),
    };

    let chunked = req
        .header("transfer-encoding")
        .map(|v| v.to_ascii_lowercase().split(',').any(|t| t.trim() == "chunked"))
        .unwrap_or(false);
    if chunked {
        req.body = read_chunked_body(r)?;
    } else if let Some(cl) = req.header("content-length") {
        let len: usize = cl
            .trim()
            .parse()
            .map_err(|_| bad(format!("bad content-length {cl:?}")))?;
        if len > MAX_BODY {
            return Err(bad("body too large"));
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        req.body = body;
    }
    Ok(Some(req))
}

/// Reads header lines up to the empty line.
fn read_header_block<R: BufRead>(r: &mut R) -> Result<Vec<(String, String)>, ReadError> {
    let mut headers: Vec<(String, String)> = Vec::new();
    loop {
        let line = read_line_required(r)?;
        if line.is_empty() {
            return Ok(headers);
        }
        if headers.len() >= MAX_HEADERS {
            return Err(bad("too many headers"));
        }
        if line.starts_with(' ') || line.starts_with('\t') {
            // Obsolete line folding: append to the previous value.
            match headers.last_mut() {
                Some((_, v)) => {
                    v.push(' ');
                    v.push_str(line.trim());
                    continue;
                }
                None => return Err(bad("continuation line before any header")),
            }
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad(format!("bad header line: {line:?}")))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("empty header name"));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
}

/// Reads a `Transfer-Encoding: chunked` body, including its trailers.
fn read_chunked_body<R: BufRead>(r: &mut R) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    loop {
        let line = read_line_required(r)?;
        let size_txt = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_txt, 16).map_err(|_| bad(format!("bad chunk size line {line:?}")))?;
        if size == 0 {
            // Trailer section, ends with an empty line.
            let _trailers = read_header_block(r)?;
            return Ok(body);
        }
        if body.len().saturating_add(size) > MAX_BODY {
            return Err(bad("body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        let end = read_line_required(r)?;
        if !end.is_empty() {
            return Err(bad("chunk not followed by CRLF"));
        }
    }
}

/// Standard reason phrase for a status code ("Unknown" for unusual ones).
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        425 => "Too Early",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Site Overloaded",
        _ => "Unknown",
    }
}

/// Writes a status line and headers (plus `server`, and `connection: close`
/// when `close`). Does not flush.
pub fn write_head<W: Write>(w: &mut W, status: u16, headers: &[(&str, String)], close: bool) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\nServer: mock-upstream\r\n", status, reason(status));
    for (k, v) in headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())
}

/// Writes a complete fixed-length response and flushes it.
pub fn write_full<W: Write>(
    w: &mut W,
    status: u16,
    content_type: &str,
    extra: &[(&str, String)],
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let mut headers: Vec<(&str, String)> = vec![
        ("Content-Type", content_type.to_string()),
        ("Content-Length", body.len().to_string()),
    ];
    headers.extend(extra.iter().cloned());
    let mut out = Vec::with_capacity(256 + body.len());
    write_head(&mut out, status, &headers, close)?;
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}

/// Encodes one chunk of a chunked body.
pub fn encode_chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// Writes one chunk in a single write and flushes it. Empty data is skipped
/// (a zero-length chunk would end the body).
pub fn write_chunk<W: Write>(w: &mut W, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    w.write_all(&encode_chunk(data))?;
    w.flush()
}

/// Writes the terminating zero-length chunk and flushes.
pub fn write_last_chunk<W: Write>(w: &mut W) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn parse(raw: &str) -> Request {
        read_request(&mut Cursor::new(raw.as_bytes().to_vec()))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn content_length_body_and_headers() {
        let r =
            parse("POST /a/chat/completions?x=1 HTTP/1.1\r\nHost: h\r\nContent-LENGTH: 4\r\nX-Foo:  bar \r\n\r\nabcd");
        assert_eq!(r.method, "POST");
        assert_eq!(r.path(), "/a/chat/completions");
        assert_eq!(r.header("content-length"), Some("4"));
        assert_eq!(r.header("X-FOO"), Some("bar"));
        assert_eq!(r.body, b"abcd");
        assert!(!r.wants_close());
    }

    #[test]
    fn chunked_body() {
        let r = parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n");
        assert_eq!(r.body, b"abc0123456789");
        assert!(r.wants_close());
    }

    #[test]
    fn keep_alive_pipelined() {
        let raw = "GET /_health HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
        let mut c = Cursor::new(raw.as_bytes().to_vec());
        assert_eq!(read_request(&mut c).unwrap().unwrap().target, "/_health");
        assert_eq!(read_request(&mut c).unwrap().unwrap().target, "/b");
        assert!(read_request(&mut c).unwrap().is_none());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for raw in [
            "garbage\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ] {
            assert!(
                matches!(
                    read_request(&mut Cursor::new(raw.as_bytes().to_vec())),
                    Err(ReadError::Bad(_))
                ),
                "{raw}"
            );
        }
        let truncated = "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc";
        assert!(matches!(
            read_request(&mut Cursor::new(truncated.as_bytes().to_vec())),
            Err(ReadError::Io(_))
        ));
    }

    #[test]
    fn query_and_percent_decoding() {
        let r = parse("POST /a/b?api-version=2024-10-21&x=%41%2&api-version=v1 HTTP/1.1\r\n\r\n");
        assert_eq!(r.query(), "api-version=2024-10-21&x=%41%2&api-version=v1");
        assert_eq!(r.query_values("api-version"), ["2024-10-21", "v1"]);
        assert_eq!(r.query_values("x"), ["A%2"]);
        assert!(r.query_values("y").is_empty());
        assert_eq!(percent_decode("v1%3A0+%zz%"), b"v1:0+%zz%");
        assert_eq!(percent_decode("%+1%2f"), b"%+1/");
        assert_eq!(parse("GET /a HTTP/1.1\r\n\r\n").query(), "");
    }

    #[test]
    fn chunk_encoding() {
        assert_eq!(encode_chunk(b"hello world, 17 b"), b"11\r\nhello world, 17 b\r\n");
    }
}
