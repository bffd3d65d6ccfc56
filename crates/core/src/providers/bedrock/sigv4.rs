//! AWS Signature Version 4: the headers that sign one request as it will be sent (method, URL,
//! headers, body), for the services that sign like botocore's `SigV4Auth` (all but S3; Bedrock's
//! signing name is `bedrock`).
//!
//! The steps, each a function here so tests can check it against the published test suite:
//! - [`canonical_request`]: the method; the canonical URI — the path as sent (already
//!   percent-encoded), dot and empty segments removed, then every byte outside RFC 3986's
//!   unreserved set and `/` encoded once more, so a model id's `:` sent as `%3A` is signed as
//!   `%253A`; the query, each name and value decoded and encoded again, pairs sorted; the headers,
//!   names lower-cased, values trimmed with inner runs of white space made one space, repeats joined
//!   with `,`, sorted, `host` taken from the URL; the signed header names; the body's hex SHA-256.
//! - [`string_to_sign`]: `AWS4-HMAC-SHA256`, the `YYYYMMDD'T'HHMMSS'Z'` time ([`amz_date`]), the scope
//!   `day/region/service/aws4_request`, the canonical request's hex SHA-256.
//! - [`signature`]: HMAC-SHA256 chained from `AWS4` + secret over the day, region, service and
//!   `aws4_request`, then over the string to sign.
//!
//! [`sign`] adds `x-amz-date`, `x-amz-security-token` (with a session token; signed, as botocore
//! does) and `authorization`. Like botocore for every service but S3 it sends no
//! `x-amz-content-sha256`: the body's hash is in the canonical request only. The URL is read with
//! the WHATWG parser, as the runtime's `fetch` reads it, so the path and query signed are the ones
//! sent (a raw space in a path is sent, and so signed, as `%20`).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The algorithm's name, first in the string to sign and in `authorization`.
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Headers [`sign`] sets itself: a caller's own would be signed twice or contradict the signature.
const RESERVED: &[&str] = &["authorization", "host", "x-amz-date", "x-amz-security-token"];

/// Headers botocore leaves unsigned: proxies and clients add or rewrite them on the way.
const UNSIGNED: &[&str] = &["expect", "user-agent", "x-amzn-trace-id"];

/// An AWS access key, with the session token of temporary credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    /// The key id only: the secret and the token stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// One request as it will be sent. `headers` are those the caller sends itself (`content-type`,
/// `accept`, …), without `host` (taken from the URL).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// The headers to add to the request, lower-case names: `x-amz-date`, `x-amz-security-token` (with
/// a session token), `authorization`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
}

/// A canonical request and the signed header names it lists (`host;x-amz-date`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalRequest {
    pub text: String,
    pub signed_headers: String,
}

/// Why a request could not be signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignError {
    /// The URL does not parse, is not `http`/`https`, or has no host.
    Url(String),
    /// The caller gave a header the signature sets itself.
    ReservedHeader(String),
    /// HMAC refused its key (it takes keys of any length: not expected).
    Key,
    /// A secret the signature needs was not given.
    MissingSecret(&'static str),
}

impl std::fmt::Display for SignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignError::Url(why) => write!(f, "cannot sign this URL: {why}"),
            SignError::ReservedHeader(name) => write!(f, "the signature sets the `{name}` header itself"),
            SignError::Key => f.write_str("the signing key was refused"),
            SignError::MissingSecret(field) => write!(f, "the secret `{field}` names was not given"),
        }
    }
}

/// Signs `request` for `service` in `region` at `unix_ms`: the headers to add to it.
pub fn sign(
    request: &Request<'_>,
    credentials: &Credentials,
    region: &str,
    service: &str,
    unix_ms: u64,
) -> Result<Signed, SignError> {
    if let Some((name, _)) = request
        .headers
        .iter()
        .find(|(name, _)| RESERVED.iter().any(|r| name.trim().eq_ignore_ascii_case(r)))
    {
        return Err(SignError::ReservedHeader(name.trim().to_ascii_lowercase()));
    }
    let date = amz_date(unix_ms);
    let mut added = vec![("x-amz-date".to_string(), date.clone())];
    if let Some(token) = &credentials.session_token {
        added.push(("x-amz-security-token".to_string(), token.clone()));
    }
    let mut headers = request.headers.to_vec();
    headers.extend(added.iter().map(|(name, value)| (name.as_str(), value.as_str())));
    let canonical = canonical_request(&Request {
        headers: &headers,
        ..*request
    })?;
    let scope = credential_scope(&date, region, service);
    let to_sign = string_to_sign(&date, &scope, &canonical.text);
    let signature = signature(&credentials.secret_access_key, &date, region, service, &to_sign)?;
    let authorization = format!(
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders={}, Signature={signature}",
        credentials.access_key_id, canonical.signed_headers
    );
    added.push(("authorization".to_string(), authorization));
    Ok(Signed { headers: added })
}

/// Percent-encodes `s` as one URL path segment: every byte outside RFC 3986's unreserved set
/// (`A-Z a-z 0-9 - . _ ~`), so a Bedrock model id's `:` becomes `%3A` and a `/` `%2F`.
pub fn path_segment(s: &str) -> String {
    percent_encode(s.as_bytes(), false)
}

/// The canonical request of `request`, whose `headers` are all that will be signed but `host`
/// (here, unlike for [`sign`], `x-amz-date` and any `x-amz-security-token` are among them).
pub fn canonical_request(request: &Request<'_>) -> Result<CanonicalRequest, SignError> {
    let url = url::Url::parse(request.url).map_err(|e| SignError::Url(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(SignError::Url(format!("the scheme `{}` is not http(s)", url.scheme())));
    }
    let host = match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => return Err(SignError::Url("no host".to_string())),
    };

    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), trim_all(value)))
        .filter(|(name, _)| !UNSIGNED.contains(&name.as_str()))
        .collect();
    headers.push(("host".to_string(), host));
    // A stable sort: a repeated header keeps its values in the order given.
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut lines: Vec<(String, String)> = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        match lines.last_mut() {
            Some((last, values)) if *last == name => {
                values.push(',');
                values.push_str(&value);
            }
            _ => lines.push((name, value)),
        }
    }
    let canonical_headers: String = lines.iter().map(|(name, value)| format!("{name}:{value}\n")).collect();
    let signed_headers = lines
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(";");

    let text = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method.to_ascii_uppercase(),
        canonical_uri(url.path()),
        canonical_query(url.query().unwrap_or("")),
        hex(&Sha256::digest(request.body)),
    );
    Ok(CanonicalRequest { text, signed_headers })
}

/// The string to sign for a canonical request made at `date` (an [`amz_date`]) within `scope` (a
/// credential scope, `day/region/service/aws4_request`).
pub fn string_to_sign(date: &str, scope: &str, canonical_request: &str) -> String {
    format!(
        "{ALGORITHM}\n{date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    )
}

/// The hex signature of `string_to_sign`, with the key derived from the secret for the day of
/// `date` (an [`amz_date`]), the region and the service.
pub fn signature(
    secret_access_key: &str,
    date: &str,
    region: &str,
    service: &str,
    string_to_sign: &str,
) -> Result<String, SignError> {
    let mut key = format!("AWS4{secret_access_key}").into_bytes();
    for part in [day(date), region, service, "aws4_request"] {
        key = hmac(&key, part)?;
    }
    Ok(hex(&hmac(&key, string_to_sign)?))
}

/// `unix_ms` as SigV4 writes a time: `YYYYMMDD'T'HHMMSS'Z'` in UTC.
pub fn amz_date(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (year, month, day) = civil_from_days(secs / 86_400);
    let second_of_day = secs % 86_400;
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // March = 0
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

/// The day (`YYYYMMDD`) of an [`amz_date`].
fn day(date: &str) -> &str {
    date.split('T').next().unwrap_or(date)
}

/// `day/region/service/aws4_request`.
fn credential_scope(date: &str, region: &str, service: &str) -> String {
    format!("{}/{region}/{service}/aws4_request", day(date))
}

/// The path with dot segments and empty segments removed, then encoded once more (services other
/// than S3 sign the encoded path's encoding).
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    let mut normal = format!("/{}", segments.join("/"));
    if path.ends_with('/') && !segments.is_empty() {
        normal.push('/');
    }
    percent_encode(normal.as_bytes(), true)
}

/// The query's `name=value` pairs, each side decoded and encoded again, sorted by name then value.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_encode(&percent_decode(name), false),
                percent_encode(&percent_decode(value), false),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// A header value with leading and trailing white space removed and inner runs made one space.
fn trim_all(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every byte outside RFC 3986's unreserved set (and `/`, when `keep_slash`) as `%XX`.
fn percent_encode(bytes: &[u8], keep_slash: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push('%');
            push_hex(&mut out, b, b"0123456789ABCDEF");
        }
    }
    out
}

/// `%XX` escapes decoded; a `%` not followed by two hex digits is kept as it is.
fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let escaped = match bytes.get(i + 1..i + 3) {
            Some(&[hi, lo]) if b == b'%' => hex_value(hi).zip(hex_value(lo)).map(|(hi, lo)| hi << 4 | lo),
            _ => None,
        };
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn hex_value(digit: u8) -> Option<u8> {
    char::from(digit).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Lower-case hex, as SigV4 writes hashes and signatures.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        push_hex(&mut out, b, b"0123456789abcdef");
    }
    out
}

fn push_hex(out: &mut String, byte: u8, digits: &[u8; 16]) {
    out.push(char::from(digits[usize::from(byte >> 4)]));
    out.push(char::from(digits[usize::from(byte & 0x0f)]));
}

/// HMAC-SHA256 of `data` under `key`.
fn hmac(key: &[u8], data: &str) -> Result<Vec<u8>, SignError> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).map_err(|_| SignError::Key)?;
    mac.update(data.as_bytes());
    Ok(mac.finalize().into_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AWS SigV4 test suite's key, region, service and time (2015-08-30T12:36:00Z).
    const SUITE_TIME_MS: u64 = 1_440_938_160_000;
    const SUITE_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const SUITE_SCOPE: &str = "20150830/us-east-1/service/aws4_request";
    const STS_TOKEN: &str = "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";

    /// One case of the AWS SigV4 test suite (`header-*` files of aws-c-auth's
    /// `tests/aws-signing-test-suite/v4/<name>/`, the `normalize: true` variants): the request
    /// without its `Host` line (the URL's), the hex SHA-256 of the canonical request (the string
    /// to sign's last line) and the signature.
    struct Vector {
        name: &'static str,
        method: &'static str,
        target: &'static str,
        headers: &'static [(&'static str, &'static str)],
        body: &'static str,
        token: Option<&'static str>,
        creq_sha256: &'static str,
        signature: &'static str,
    }

    #[rustfmt::skip]
    const SUITE: &[Vector] = &[
        Vector { name: "get-vanilla", method: "GET", target: "/", headers: &[], body: "", token: None, creq_sha256: "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63", signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
        Vector { name: "get-vanilla-query-order-key-case", method: "GET", target: "/?Param2=value2&Param1=value1", headers: &[], body: "", token: None, creq_sha256: "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0", signature: "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500" },
        Vector { name: "get-vanilla-query-order-encoded", method: "GET", target: "/?Param-3=Value3&Param=Value2&%E1%88%B4=Value1", headers: &[], body: "", token: None, creq_sha256: "868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71", signature: "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac" },
        Vector { name: "get-vanilla-query-unreserved", method: "GET", target: "/?-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", headers: &[], body: "", token: None, creq_sha256: "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177", signature: "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197" },
        Vector { name: "get-vanilla-utf8-query", method: "GET", target: "/?ሴ=bar", headers: &[], body: "", token: None, creq_sha256: "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073", signature: "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04" },
        Vector { name: "get-header-key-duplicate", method: "GET", target: "/", headers: &[("My-Header1", "value2"), ("My-Header1", "value2"), ("My-Header1", "value1")], body: "", token: None, creq_sha256: "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c", signature: "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea" },
        Vector { name: "get-header-value-multiline", method: "GET", target: "/", headers: &[("My-Header1", "value1\n  value2\n     value3")], body: "", token: None, creq_sha256: "e99419459a677bc11de234014be3c4e72c1ea5b454ceb58b613061f5d7a162e8", signature: "cfd34249e4b1c8d6b91ef74165d41a32e5fab3306300901bb65a51a73575eefd" },
        Vector { name: "get-header-value-order", method: "GET", target: "/", headers: &[("My-Header1", "value4"), ("My-Header1", "value1"), ("My-Header1", "value3"), ("My-Header1", "value2")], body: "", token: None, creq_sha256: "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86", signature: "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01" },
        Vector { name: "get-header-value-trim", method: "GET", target: "/", headers: &[("My-Header1", " value1"), ("My-Header2", " \"a   b   c\"")], body: "", token: None, creq_sha256: "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7", signature: "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736" },
        Vector { name: "get-unreserved", method: "GET", target: "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", headers: &[], body: "", token: None, creq_sha256: "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9", signature: "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f" },
        Vector { name: "get-relative-normalized", method: "GET", target: "/example/..", headers: &[], body: "", token: None, creq_sha256: "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63", signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
        Vector { name: "get-relative-relative-normalized", method: "GET", target: "/example1/example2/../..", headers: &[], body: "", token: None, creq_sha256: "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63", signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
        Vector { name: "get-slash-normalized", method: "GET", target: "//", headers: &[], body: "", token: None, creq_sha256: "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63", signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
        Vector { name: "get-slash-dot-slash-normalized", method: "GET", target: "/./", headers: &[], body: "", token: None, creq_sha256: "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63", signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31" },
        Vector { name: "get-slash-pointless-dot-normalized", method: "GET", target: "/./example", headers: &[], body: "", token: None, creq_sha256: "214d50c111a8edc4819da6a636336472c916b5240f51e9a51b5c3305180cf702", signature: "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5" },
        Vector { name: "get-slashes-normalized", method: "GET", target: "//example//", headers: &[], body: "", token: None, creq_sha256: "cb96b4ac96d501f7c5c15bc6d67b3035061cfced4af6585ad927f7e6c985c015", signature: "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84" },
        Vector { name: "get-vanilla-with-session-token", method: "GET", target: "/", headers: &[], body: "", token: Some("6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"), creq_sha256: "067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b", signature: "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8" },
        Vector { name: "post-vanilla", method: "POST", target: "/", headers: &[], body: "", token: None, creq_sha256: "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87", signature: "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b" },
        Vector { name: "post-vanilla-query", method: "POST", target: "/?Param1=value1", headers: &[], body: "", token: None, creq_sha256: "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd", signature: "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11" },
        Vector { name: "post-header-key-sort", method: "POST", target: "/", headers: &[("My-Header1", "value1")], body: "", token: None, creq_sha256: "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65", signature: "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c" },
        Vector { name: "post-header-value-case", method: "POST", target: "/", headers: &[("My-Header1", "VALUE1")], body: "", token: None, creq_sha256: "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93", signature: "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d" },
        Vector { name: "post-sts-header-before", method: "POST", target: "/", headers: &[], body: "", token: Some(STS_TOKEN), creq_sha256: "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6", signature: "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead" },
        // `sign_body: true` in aws-c-auth's suite: the body's hash is also sent (and so signed)
        // as `x-amz-content-sha256`, given here as a header of the caller's.
        Vector { name: "post-x-www-form-urlencoded", method: "POST", target: "/", headers: &[("Content-Type", "application/x-www-form-urlencoded"), ("Content-Length", "13"), ("x-amz-content-sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e")], body: "Param1=value1", token: None, creq_sha256: "b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb", signature: "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b" },
        Vector { name: "post-x-www-form-urlencoded-parameters", method: "POST", target: "/", headers: &[("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"), ("Content-Length", "13"), ("x-amz-content-sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e")], body: "Param1=value1", token: None, creq_sha256: "a89f1a5b53e37702ee6363ce1da3ce8f54386f3c8f352ae652153c2982a0bc4d", signature: "328d1b9eaadca9f5818ef05e8392801e091653bafec24fcab71e7344e7f51422" },
        // The original 2015 suite's version (botocore's `tests/unit/auth/aws4_testsuite`): no
        // `x-amz-content-sha256`, the body's hash in the canonical request only.
        Vector { name: "post-x-www-form-urlencoded (2015 suite)", method: "POST", target: "/", headers: &[("Content-Type", "application/x-www-form-urlencoded")], body: "Param1=value1", token: None, creq_sha256: "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281", signature: "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a" },
    ];

    fn suite_credentials(token: Option<&str>) -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: SUITE_SECRET.into(),
            session_token: token.map(str::to_string),
        }
    }

    fn header<'a>(signed: &'a Signed, name: &str) -> Option<&'a str> {
        signed.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_aws_test_suite_signs_as_published() {
        for v in SUITE {
            let url = format!("https://example.amazonaws.com{}", v.target);
            let request = Request {
                method: v.method,
                url: &url,
                headers: v.headers,
                body: v.body.as_bytes(),
            };
            let credentials = suite_credentials(v.token);
            let signed = sign(&request, &credentials, "us-east-1", "service", SUITE_TIME_MS).unwrap();

            let mut all = v.headers.to_vec();
            all.push(("X-Amz-Date", "20150830T123600Z"));
            all.extend(v.token.map(|t| ("X-Amz-Security-Token", t)));
            let canonical = canonical_request(&Request {
                headers: &all,
                ..request
            })
            .unwrap();
            let to_sign = string_to_sign("20150830T123600Z", SUITE_SCOPE, &canonical.text);
            assert_eq!(
                to_sign,
                format!("AWS4-HMAC-SHA256\n20150830T123600Z\n{SUITE_SCOPE}\n{}", v.creq_sha256),
                "{}: canonical request\n{}",
                v.name,
                canonical.text
            );
            let expected = format!(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{SUITE_SCOPE}, SignedHeaders={}, Signature={}",
                canonical.signed_headers, v.signature
            );
            assert_eq!(header(&signed, "authorization"), Some(expected.as_str()), "{}", v.name);
            assert_eq!(header(&signed, "x-amz-date"), Some("20150830T123600Z"), "{}", v.name);
            assert_eq!(header(&signed, "x-amz-security-token"), v.token, "{}", v.name);
            assert_eq!(header(&signed, "x-amz-content-sha256"), None, "{}", v.name);
        }
    }

    /// The canonical request of a request to the suite's host.
    fn suite_canonical(method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> String {
        let url = format!("https://example.amazonaws.com{target}");
        let request = Request {
            method,
            url: &url,
            headers,
            body: body.as_bytes(),
        };
        canonical_request(&request).unwrap().text
    }

    #[test]
    fn canonical_requests_are_the_published_ones() {
        const DATE: (&str, &str) = ("X-Amz-Date", "20150830T123600Z");
        const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(
            suite_canonical("get", "/?Param2=value2&Param1=value1", &[DATE], ""),
            format!("GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n{EMPTY_SHA256}")
        );
        assert_eq!(
            suite_canonical("GET", "/", &[("My-Header1", " value1"), ("My-Header2", " \"a   b   c\""), DATE], ""),
            format!("GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n{EMPTY_SHA256}")
        );
        assert_eq!(
            suite_canonical("GET", "/", &[("My-Header1", "value2"), ("My-Header1", "value2"), ("My-Header1", "value1"), DATE], ""),
            format!("GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n{EMPTY_SHA256}")
        );
        assert_eq!(
            suite_canonical("GET", "/?Param-3=Value3&Param=Value2&%E1%88%B4=Value1", &[DATE], ""),
            format!("GET\n/\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n{EMPTY_SHA256}")
        );
        assert_eq!(
            suite_canonical("GET", "//example//", &[DATE], ""),
            format!("GET\n/example/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n{EMPTY_SHA256}")
        );
        // post-x-www-form-urlencoded of the 2015 suite, as botocore builds it.
        assert_eq!(
            suite_canonical("POST", "/", &[("Content-Type", "application/x-www-form-urlencoded"), DATE], "Param1=value1"),
            "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"
        );
    }

    /// get-space and get-utf8 send raw bytes in the request line, which `fetch` never does: their
    /// canonical URIs are checked on the raw path, and the rest of their chain from the published
    /// canonical request.
    #[test]
    fn raw_paths_of_the_suite_encode_as_published() {
        let cases = [
            (
                "/example space/",
                "/example%20space/",
                "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
                "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741",
            ),
            (
                "/ሴ",
                "/%E1%88%B4",
                "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
                "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85",
            ),
        ];
        for (raw, uri, creq_sha256, expected) in cases {
            assert_eq!(canonical_uri(raw), uri);
            let creq = format!(
                "GET\n{uri}\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            );
            let to_sign = string_to_sign("20150830T123600Z", SUITE_SCOPE, &creq);
            assert!(to_sign.ends_with(creq_sha256), "{raw}");
            let got = signature(SUITE_SECRET, "20150830T123600Z", "us-east-1", "service", &to_sign).unwrap();
            assert_eq!(got, expected, "{raw}");
        }
        // Sent through `fetch`, the space is `%20` on the wire and so `%2520` in the signature.
        let request = Request {
            method: "GET",
            url: "https://example.amazonaws.com/example space/",
            headers: &[],
            body: b"",
        };
        assert!(canonical_request(&request)
            .unwrap()
            .text
            .starts_with("GET\n/example%2520space/\n"));
    }

    /// A Bedrock InvokeModel request; the expected values are botocore 1.43's for
    /// `invoke_model(modelId="anthropic.claude-3-haiku-20240307-v1:0", …)` at the same time, with
    /// and without a session token.
    #[test]
    fn a_bedrock_request_double_encodes_the_model_id() {
        let model = "anthropic.claude-3-haiku-20240307-v1:0";
        let url = format!(
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/{}/invoke",
            path_segment(model)
        );
        assert_eq!(
            url,
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke"
        );
        let body = br#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}"#;
        let headers = [("Content-Type", "application/json"), ("Accept", "application/json")];
        let request = Request {
            method: "POST",
            url: &url,
            headers: &headers,
            body,
        };
        let at = 1_718_886_896_000; // 2024-06-20T12:34:56Z

        let mut all = headers.to_vec();
        all.push(("x-amz-date", "20240620T123456Z"));
        let canonical = canonical_request(&Request {
            headers: &all,
            ..request
        })
        .unwrap();
        assert_eq!(
            canonical.text,
            "POST\n/model/anthropic.claude-3-haiku-20240307-v1%253A0/invoke\n\naccept:application/json\ncontent-type:application/json\nhost:bedrock-runtime.us-west-2.amazonaws.com\nx-amz-date:20240620T123456Z\n\naccept;content-type;host;x-amz-date\nbfe9595c6d3fa2509aa43ae91038e137bdd65ac5d9fe6b5a6f3d86a876b1ce96"
        );
        assert_eq!(
            string_to_sign("20240620T123456Z", "20240620/us-west-2/bedrock/aws4_request", &canonical.text),
            "AWS4-HMAC-SHA256\n20240620T123456Z\n20240620/us-west-2/bedrock/aws4_request\n1618f9aec4599c7526bbb1a04807e2db625b93c1dcba561e3243db652abbcb36"
        );

        let signed = sign(&request, &suite_credentials(None), "us-west-2", "bedrock", at).unwrap();
        assert_eq!(
            signed.headers,
            vec![
                ("x-amz-date".to_string(), "20240620T123456Z".to_string()),
                (
                    "authorization".to_string(),
                    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240620/us-west-2/bedrock/aws4_request, SignedHeaders=accept;content-type;host;x-amz-date, Signature=c9b6cc3d49d54cd0135e1a0837f930e4789f1aa94329d777f0fcf6c6655bd95e".to_string()
                ),
            ]
        );
        let token = "FwoGZXIvYXdzEXAMPLETOKEN//+=";
        let signed = sign(&request, &suite_credentials(Some(token)), "us-west-2", "bedrock", at).unwrap();
        assert_eq!(header(&signed, "x-amz-security-token"), Some(token));
        assert_eq!(
            header(&signed, "authorization"),
            Some("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240620/us-west-2/bedrock/aws4_request, SignedHeaders=accept;content-type;host;x-amz-date;x-amz-security-token, Signature=634494b03294590a93e1e3695d44b0c45984e77759a893f2b5e54cc21e680e78")
        );
    }

    #[test]
    fn the_host_comes_from_the_url() {
        let host_line = |url: &str| {
            let request = Request {
                method: "GET",
                url,
                headers: &[],
                body: b"",
            };
            let text = canonical_request(&request).unwrap().text;
            text.lines().find(|l| l.starts_with("host:")).map(str::to_string)
        };
        assert_eq!(
            host_line("https://Example.AmazonAWS.com/").as_deref(),
            Some("host:example.amazonaws.com")
        );
        assert_eq!(
            host_line("https://example.com:443/").as_deref(),
            Some("host:example.com")
        );
        assert_eq!(host_line("http://example.com:80/").as_deref(), Some("host:example.com"));
        assert_eq!(
            host_line("https://example.com:8443/x").as_deref(),
            Some("host:example.com:8443")
        );
        assert_eq!(
            host_line("http://user:pw@127.0.0.1:9000/").as_deref(),
            Some("host:127.0.0.1:9000")
        );
        assert_eq!(
            host_line("https://example.com/a#fragment?x=1").as_deref(),
            Some("host:example.com")
        );
    }

    #[test]
    fn bad_urls_and_reserved_headers_are_refused() {
        let credentials = suite_credentials(None);
        for url in ["not a url", "/relative", "ftp://example.com/", "data:text/plain,x"] {
            let request = Request {
                method: "GET",
                url,
                headers: &[],
                body: b"",
            };
            assert!(
                matches!(
                    sign(&request, &credentials, "us-east-1", "s", 0),
                    Err(SignError::Url(_))
                ),
                "{url}"
            );
        }
        for name in ["Host", "authorization", "X-Amz-Date", " x-amz-security-token"] {
            let headers = [(name, "x")];
            let request = Request {
                method: "GET",
                url: "https://example.com/",
                headers: &headers,
                body: b"",
            };
            assert_eq!(
                sign(&request, &credentials, "us-east-1", "s", 0),
                Err(SignError::ReservedHeader(name.trim().to_ascii_lowercase()))
            );
        }
    }

    #[test]
    fn proxy_rewritten_headers_are_not_signed() {
        let request = Request {
            method: "GET",
            url: "https://example.com/",
            headers: &[
                ("User-Agent", "x"),
                ("Expect", "100-continue"),
                ("X-Amzn-Trace-Id", "t"),
                ("Accept", "*/*"),
            ],
            body: b"",
        };
        assert_eq!(canonical_request(&request).unwrap().signed_headers, "accept;host");
    }

    #[test]
    fn queries_are_decoded_encoded_and_sorted() {
        assert_eq!(canonical_query(""), "");
        assert_eq!(canonical_query("b=2&a=1&a=0"), "a=0&a=1&b=2");
        assert_eq!(canonical_query("flag&x="), "flag=&x=");
        assert_eq!(canonical_query("k=a%2fb&s=a b&t=%7E"), "k=a%2Fb&s=a%20b&t=~");
        assert_eq!(canonical_query("p=100%&q=%zz&&"), "p=100%25&q=%25zz");
        assert_eq!(canonical_query("e=%E1%88%B4"), "e=%E1%88%B4");
    }

    #[test]
    fn path_segments_keep_only_unreserved_bytes() {
        assert_eq!(
            path_segment("anthropic.claude-3-5-sonnet-20240620-v1:0"),
            "anthropic.claude-3-5-sonnet-20240620-v1%3A0"
        );
        assert_eq!(
            path_segment("arn:aws:bedrock:us-east-1:123:inference-profile/us.x"),
            "arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.x"
        );
        assert_eq!(path_segment("a b%~_"), "a%20b%25~_");
        assert_eq!(path_segment("é"), "%C3%A9");
        assert_eq!(canonical_uri("/model/m%3A0/invoke"), "/model/m%253A0/invoke");
        assert_eq!(canonical_uri("/"), "/");
        assert_eq!(canonical_uri("/a/./b/../c/"), "/a/c/");
        assert_eq!(canonical_uri("/.."), "/");
    }

    #[test]
    fn dates_are_utc_and_in_the_sigv4_form() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(SUITE_TIME_MS), "20150830T123600Z");
        assert_eq!(amz_date(SUITE_TIME_MS + 999), "20150830T123600Z");
        assert_eq!(amz_date(951_782_400_000), "20000229T000000Z");
        assert_eq!(amz_date(951_868_799_000), "20000229T235959Z");
        assert_eq!(amz_date(1_709_164_800_000), "20240229T000000Z");
        assert_eq!(amz_date(4_107_542_400_000), "21000301T000000Z");
        assert_eq!(amz_date(253_402_300_799_000), "99991231T235959Z");
    }

    /// Every day from 1970 to 2400 against a plain day-by-day calendar.
    #[test]
    fn civil_from_days_matches_a_day_by_day_count() {
        let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
        let (mut year, mut month, mut day) = (1970, 1, 1);
        for days in 0..157_000 {
            assert_eq!(civil_from_days(days), (year, month, day), "day {days}");
            let month_len = match month {
                2 if leap(year) => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            day += 1;
            if day > month_len {
                day = 1;
                month += 1;
                if month > 12 {
                    month = 1;
                    year += 1;
                }
            }
        }
        assert_eq!(year, 2399);
    }

    #[test]
    fn credentials_do_not_print_their_secrets() {
        let shown = format!("{:?}", suite_credentials(Some("token-xyz")));
        assert!(shown.contains("AKIDEXAMPLE"));
        assert!(!shown.contains(SUITE_SECRET) && !shown.contains("token-xyz"), "{shown}");
    }
}
