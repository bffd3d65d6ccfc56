//! AWS Signature Version 4, checked the way an AWS service checks it: recomputed from the
//! request exactly as received, and refused in AWS's words ([`Refusal`]) when anything differs.
//!
//! [`verify`] is pure (the request, the credentials the service knows, the service name and the
//! clock are arguments), so the published AWS test-suite vectors run against it as they are.
//!
//! What it recomputes (the AWS SigV4 documentation, "Create a signed AWS API request"):
//! - the canonical request: the method; the canonical URI — for services other than S3 the path
//!   as received with dot segments and repeated slashes removed, then every byte outside
//!   `A-Za-z0-9-._~/` percent-encoded (so an escape sent as `%3A` is signed as `%253A`); the
//!   canonical query (names and values decoded, re-encoded strictly, sorted); each signed header
//!   as `name:value` (values trimmed, inner runs of spaces collapsed, repeated headers joined by
//!   `,`); the signed header list; the hex SHA-256 of the body;
//! - the string to sign: `AWS4-HMAC-SHA256`, `x-amz-date`, the scope
//!   `<yyyymmdd>/<region>/<service>/aws4_request`, the hex SHA-256 of the canonical request;
//! - the signing key: HMAC-SHA256 chained over `"AWS4" + secret`, the date, the region, the
//!   service and `aws4_request`; the signature is the hex HMAC of the string to sign under it.
//!
//! Before the signature it checks what a service checks first: an `Authorization` header
//! naming `Credential`, `SignedHeaders` and `Signature`, an `x-amz-date` (the only clock header
//! taken), `host`, `x-amz-date` and any `x-amz-security-token` among the signed headers, a known
//! key id and session token, a scope whose date is the request's, whose service is the expected
//! one, whose region is not empty and which ends in `aws4_request`, and a date within
//! [`MAX_SKEW_SECS`] of the clock.

use crate::crypto::{hex, hmac_sha256, same, sha256};
use crate::http::{percent_decode, Request};

/// The only signing algorithm accepted.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// How far `x-amz-date` may be from the service's clock, either way.
pub const MAX_SKEW_SECS: i64 = 5 * 60;
/// The access key id the mock knows unless `MOCK_AWS_ACCESS_KEY_ID` says otherwise.
pub const DEFAULT_ACCESS_KEY_ID: &str = "AKIAMOCKSWITCHYARD";
/// The secret the mock knows unless `MOCK_AWS_SECRET_ACCESS_KEY` says otherwise.
pub const DEFAULT_SECRET_ACCESS_KEY: &str = "mock-secret-key-for-switchyard-tests";

/// The words of a signature that does not match.
pub const MISMATCH: &str = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";

/// The credentials a service knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// A temporary credential's token: requests must then carry it as `x-amz-security-token`
    /// (and requests without one are refused, as are requests with one when this is `None`).
    pub session_token: Option<String>,
}

impl Default for Credentials {
    fn default() -> Self {
        Credentials {
            access_key_id: DEFAULT_ACCESS_KEY_ID.to_string(),
            secret_access_key: DEFAULT_SECRET_ACCESS_KEY.to_string(),
            session_token: None,
        }
    }
}

impl Credentials {
    /// A second, temporary credential (an access key id, its secret and its session token) from
    /// `MOCK_AWS_TEMP_ACCESS_KEY_ID`, `MOCK_AWS_TEMP_SECRET_ACCESS_KEY` and
    /// `MOCK_AWS_TEMP_SESSION_TOKEN`: `None` unless all three are set.
    pub fn temporary_from_env() -> Option<Credentials> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Some(Credentials {
            access_key_id: var("MOCK_AWS_TEMP_ACCESS_KEY_ID")?,
            secret_access_key: var("MOCK_AWS_TEMP_SECRET_ACCESS_KEY")?,
            session_token: Some(var("MOCK_AWS_TEMP_SESSION_TOKEN")?),
        })
    }

    /// Whether `req` names this credential's access key id in its `Authorization`.
    pub fn named_by(&self, req: &Request) -> bool {
        req.header("authorization")
            .is_some_and(|h| h.contains(&format!("Credential={}/", self.access_key_id)))
    }

    /// `MOCK_AWS_ACCESS_KEY_ID`, `MOCK_AWS_SECRET_ACCESS_KEY` and `MOCK_AWS_SESSION_TOKEN`
    /// (unset or empty: the defaults, and no session token).
    pub fn from_env() -> Credentials {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let default = Credentials::default();
        Credentials {
            access_key_id: var("MOCK_AWS_ACCESS_KEY_ID").unwrap_or(default.access_key_id),
            secret_access_key: var("MOCK_AWS_SECRET_ACCESS_KEY").unwrap_or(default.secret_access_key),
            session_token: var("MOCK_AWS_SESSION_TOKEN"),
        }
    }
}

/// Why a request is refused (all of them answer 403).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization` header at all.
    Missing,
    /// The authorization is not a complete SigV4 one: what is missing or malformed.
    Incomplete(String),
    /// The key id, or the session token, is not one the service knows.
    UnknownKey,
    /// Everything is there, but the scope, the time or the signature is wrong: why.
    Invalid(String),
}

impl Refusal {
    /// The exception name AWS sends in `x-amzn-errortype`.
    pub fn error_type(&self) -> &'static str {
        match self {
            Refusal::Missing => "MissingAuthenticationTokenException",
            Refusal::Incomplete(_) => "IncompleteSignatureException",
            Refusal::UnknownKey => "UnrecognizedClientException",
            Refusal::Invalid(_) => "InvalidSignatureException",
        }
    }

    /// The `message` of the error body.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Missing => "Missing Authentication Token",
            Refusal::UnknownKey => "The security token included in the request is invalid.",
            Refusal::Incomplete(m) | Refusal::Invalid(m) => m,
        }
    }
}

/// The credential scope of a request that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub date: String,
    pub region: String,
    pub service: String,
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…,
/// Signature=…` header.
struct Authorization<'a> {
    credential: &'a str,
    signed_headers: &'a str,
    signature: &'a str,
}

impl<'a> Authorization<'a> {
    /// The parts, or what AWS says is missing (`amz_date` takes part in that list).
    fn parse(header: &'a str, amz_date: Option<&str>) -> Result<Authorization<'a>, Refusal> {
        let (algorithm, params) = header.split_once(' ').unwrap_or((header, ""));
        let param = |name: &str| {
            params
                .split(',')
                .filter_map(|p| p.trim().split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.trim())
        };
        let (credential, signed_headers, signature) = (param("Credential"), param("SignedHeaders"), param("Signature"));
        let mut missing: Vec<String> = [
            ("Credential", credential),
            ("Signature", signature),
            ("SignedHeaders", signed_headers),
        ]
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(name, _)| format!("Authorization header requires '{name}' parameter."))
        .collect();
        if amz_date.is_none() {
            missing.push("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.".into());
        }
        match (credential, signed_headers, signature) {
            (Some(credential), Some(signed_headers), Some(signature)) if missing.is_empty() => {
                if algorithm != ALGORITHM {
                    return Err(Refusal::Incomplete(format!(
                        "Unsupported AWS 'algorithm': '{algorithm}'."
                    )));
                }
                Ok(Authorization {
                    credential,
                    signed_headers,
                    signature,
                })
            }
            _ => Err(Refusal::Incomplete(format!(
                "{} Authorization={header}",
                missing.join(" ")
            ))),
        }
    }
}

/// Checks `req`'s SigV4 signature for `service` against the known `creds`, `now` being the
/// service's clock (Unix seconds). The region is the one the request's scope names.
pub fn verify(req: &Request, creds: &Credentials, service: &str, now: i64) -> Result<Scope, Refusal> {
    let header = req.header("authorization").ok_or(Refusal::Missing)?;
    let amz_date = req.header("x-amz-date");
    let auth = Authorization::parse(header, amz_date)?;
    let amz_date = amz_date.unwrap_or_default();
    let scope: Vec<&str> = auth.credential.split('/').collect();
    let [key_id, date, region, scope_service, terminator] = scope[..] else {
        return Err(Refusal::Incomplete(format!(
            "Credential should be of the form <access key id>/<yyyymmdd>/<region>/<service>/aws4_request, got '{}'.",
            auth.credential
        )));
    };
    if key_id != creds.access_key_id || req.header("x-amz-security-token") != creds.session_token.as_deref() {
        return Err(Refusal::UnknownKey);
    }
    let signed: Vec<String> = auth.signed_headers.split(';').map(str::to_ascii_lowercase).collect();
    let token = req.header("x-amz-security-token").map(|_| "x-amz-security-token");
    for required in ["host", "x-amz-date"].into_iter().chain(token) {
        if !signed.iter().any(|s| s == required) {
            return Err(Refusal::Incomplete(format!(
                "'{required}' must be a 'SignedHeader' in the AWS Authorization."
            )));
        }
    }
    let Some(time) = parse_amz_date(amz_date) else {
        return Err(Refusal::Incomplete(format!(
            "Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See http://en.wikipedia.org/wiki/ISO_8601"
        )));
    };
    if amz_date.get(..8) != Some(date) {
        return Err(Refusal::Invalid(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{date}' != '{}', from '{amz_date}'.",
            amz_date.get(..8).unwrap_or_default()
        )));
    }
    if scope_service != service {
        return Err(Refusal::Invalid(format!(
            "Credential should be scoped to correct service: '{service}'. "
        )));
    }
    if terminator != "aws4_request" {
        return Err(Refusal::Invalid(format!(
            "Credential should be scoped with a valid terminator: 'aws4_request', not '{terminator}'."
        )));
    }
    if region.is_empty() {
        return Err(Refusal::Invalid(
            "Credential should be scoped to a valid region. ".into(),
        ));
    }
    if time < now - MAX_SKEW_SECS {
        return Err(Refusal::Invalid(format!(
            "Signature expired: {amz_date} is now earlier than {} ({} - 5 min.)",
            format_amz_date(now - MAX_SKEW_SECS),
            format_amz_date(now)
        )));
    }
    if time > now + MAX_SKEW_SECS {
        return Err(Refusal::Invalid(format!(
            "Signature not yet current: {amz_date} is still later than {} ({} + 5 min.)",
            format_amz_date(now + MAX_SKEW_SECS),
            format_amz_date(now)
        )));
    }
    let canonical = canonical_request(req, &signed);
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex(&sha256(canonical.as_bytes()))
    );
    let mut key = format!("AWS4{}", creds.secret_access_key).into_bytes();
    for part in [date, region, service, "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes()).to_vec();
    }
    let expected = hex(&hmac_sha256(&key, to_sign.as_bytes()));
    if !same(expected.as_bytes(), auth.signature.as_bytes()) {
        // Like AWS's JSON services, the answer shows what was signed, to help find the difference.
        return Err(Refusal::Invalid(format!(
            "{MISMATCH}\n\nThe Canonical String for this request should have been\n'{canonical}'\n\nThe String-to-Sign should have been\n'{to_sign}'\n"
        )));
    }
    Ok(Scope {
        date: date.to_string(),
        region: region.to_string(),
        service: service.to_string(),
    })
}

/// The canonical request over the `signed` header names (lower case, in the order given).
fn canonical_request(req: &Request, signed: &[String]) -> String {
    let headers: String = signed
        .iter()
        .map(|name| {
            let values: Vec<String> = req
                .headers
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect();
            format!("{name}:{}\n", values.join(","))
        })
        .collect();
    format!(
        "{}\n{}\n{}\n{headers}\n{}\n{}",
        req.method,
        canonical_uri(req.path()),
        canonical_query(req.query()),
        signed.join(";"),
        hex(&sha256(&req.body))
    )
}

/// Every byte outside the unreserved set (and `/`, unless `slash` is to be encoded) as `%XX`.
fn uri_encode(bytes: &[u8], encode_slash: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (b == b'/' && !encode_slash) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The path with `.` and `..` segments resolved and empty segments dropped (keeping a leading
/// and a trailing slash), then encoded once more.
fn canonical_uri(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            s => kept.push(s),
        }
    }
    let trailing = if path.ends_with('/') && !kept.is_empty() {
        "/"
    } else {
        ""
    };
    uri_encode(format!("/{}{trailing}", kept.join("/")).as_bytes(), false)
}

/// The query's names and values decoded, encoded strictly, sorted by name then value.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                uri_encode(&percent_decode(k), true),
                uri_encode(&percent_decode(v), true),
            )
        })
        .collect();
    pairs.sort();
    let pairs: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join("&")
}

/// Days from 1970-01-01 to a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `yyyymmddThhmmssZ` as Unix seconds.
pub fn parse_amz_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, sec) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec)
}

/// Unix seconds as `yyyymmddThhmmssZ`.
pub fn format_amz_date(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // Civil from days (the inverse of `days_from_civil`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2015-08-30T12:36:00Z, the clock of the AWS test suite.
    const SUITE_TIME: i64 = 1_440_938_160;
    const SUITE_TOKEN: &str = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";

    fn suite_creds(token: Option<&str>) -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: token.map(str::to_string),
        }
    }

    fn request(method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Request {
        Request {
            method: method.into(),
            target: target.into(),
            version: "HTTP/1.1".into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    /// A suite request (`host` and `x-amz-date` first, then `extra`) carrying the suite's
    /// published authorization for `signed` and `signature`.
    fn suite_request(
        method: &str,
        target: &str,
        extra: &[(&str, &str)],
        body: &str,
        signed: &str,
        sig: &str,
    ) -> Request {
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders={signed}, Signature={sig}"
        );
        let mut headers = vec![("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")];
        headers.extend_from_slice(extra);
        headers.push(("Authorization", &auth));
        request(method, target, &headers, body)
    }

    const HOST_DATE: &str = "host;x-amz-date";

    /// The AWS SigV4 test suite (credentials AKIDEXAMPLE, us-east-1, service `service`,
    /// 20150830T123600Z): each request with its published signature verifies, and the same
    /// request with one hex digit of the signature changed does not.
    #[test]
    fn the_aws_test_suite_vectors_verify() {
        let cases: Vec<(&str, Request)> = vec![
            (
                "get-vanilla",
                suite_request("GET", "/", &[], "", HOST_DATE, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
            ),
            (
                "post-vanilla",
                suite_request("POST", "/", &[], "", HOST_DATE, "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
            ),
            (
                "get-vanilla-query-order-key-case",
                suite_request(
                    "GET",
                    "/?Param2=value2&Param1=value1",
                    &[],
                    "",
                    HOST_DATE,
                    "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
                ),
            ),
            (
                "get-vanilla-empty-query-key",
                suite_request(
                    "GET",
                    "/?Param1=value1",
                    &[],
                    "",
                    HOST_DATE,
                    "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb",
                ),
            ),
            (
                "post-vanilla-query",
                suite_request(
                    "POST",
                    "/?Param1=value1",
                    &[],
                    "",
                    HOST_DATE,
                    "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11",
                ),
            ),
            (
                "get-vanilla-query-unreserved",
                suite_request(
                    "GET",
                    "/?-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                    &[],
                    "",
                    HOST_DATE,
                    "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197",
                ),
            ),
            (
                // Sent encoded on the wire; decoded and encoded again, it is signed the same.
                "get-vanilla-utf8-query",
                suite_request(
                    "GET",
                    "/?%E1%88%B4=bar",
                    &[],
                    "",
                    HOST_DATE,
                    "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04",
                ),
            ),
            (
                "get-unreserved",
                suite_request(
                    "GET",
                    "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                    &[],
                    "",
                    HOST_DATE,
                    "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f",
                ),
            ),
            (
                // The suite's path is the raw `/ሴ`: encoded once it is `/%E1%88%B4`.
                "get-utf8",
                suite_request("GET", "/ሴ", &[], "", HOST_DATE, "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
            ),
            (
                "get-header-key-duplicate",
                suite_request(
                    "GET",
                    "/",
                    &[("My-Header1", "value2"), ("My-Header1", "value2"), ("My-Header1", "value1")],
                    "",
                    "host;my-header1;x-amz-date",
                    "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
                ),
            ),
            (
                "get-header-value-order",
                suite_request(
                    "GET",
                    "/",
                    &[
                        ("My-Header1", "value4"),
                        ("My-Header1", "value1"),
                        ("My-Header1", "value3"),
                        ("My-Header1", "value2"),
                    ],
                    "",
                    "host;my-header1;x-amz-date",
                    "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01",
                ),
            ),
            (
                "get-header-value-trim",
                suite_request(
                    "GET",
                    "/",
                    &[("My-Header1", " value1"), ("My-Header2", " \"a   b   c\"")],
                    "",
                    "host;my-header1;my-header2;x-amz-date",
                    "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
                ),
            ),
            (
                "post-header-key-sort",
                suite_request(
                    "POST",
                    "/",
                    &[("My-Header1", "value1")],
                    "",
                    "host;my-header1;x-amz-date",
                    "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c",
                ),
            ),
            (
                "post-header-value-case",
                suite_request(
                    "POST",
                    "/",
                    &[("My-Header1", "VALUE1")],
                    "",
                    "host;my-header1;x-amz-date",
                    "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d",
                ),
            ),
            (
                "post-x-www-form-urlencoded",
                suite_request(
                    "POST",
                    "/",
                    &[("Content-Type", "application/x-www-form-urlencoded")],
                    "Param1=value1",
                    "content-type;host;x-amz-date",
                    "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
                ),
            ),
            (
                "post-x-www-form-urlencoded-parameters",
                suite_request(
                    "POST",
                    "/",
                    &[("Content-Type", "application/x-www-form-urlencoded; charset=utf8")],
                    "Param1=value1",
                    "content-type;host;x-amz-date",
                    "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe",
                ),
            ),
        ];
        for (name, req) in &cases {
            let scope =
                verify(req, &suite_creds(None), "service", SUITE_TIME).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(
                (scope.date.as_str(), scope.region.as_str()),
                ("20150830", "us-east-1"),
                "{name}"
            );
            let mut tampered = req.clone();
            for (k, v) in &mut tampered.headers {
                if k == "authorization" {
                    let flipped = if v.ends_with('0') { '1' } else { '0' };
                    v.pop();
                    v.push(flipped);
                }
            }
            assert!(
                matches!(
                    verify(&tampered, &suite_creds(None), "service", SUITE_TIME),
                    Err(Refusal::Invalid(_))
                ),
                "{name}: a changed signature must not verify"
            );
        }
        // get-vanilla-with-session-token: the token is a signed header.
        let req = suite_request(
            "GET",
            "/",
            &[("X-Amz-Security-Token", SUITE_TOKEN)],
            "",
            "host;x-amz-date;x-amz-security-token",
            "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8",
        );
        assert!(verify(&req, &suite_creds(Some(SUITE_TOKEN)), "service", SUITE_TIME).is_ok());
        // The same request to a service that expects no token, or another one.
        assert_eq!(
            verify(&req, &suite_creds(None), "service", SUITE_TIME),
            Err(Refusal::UnknownKey)
        );
        assert_eq!(
            verify(&req, &suite_creds(Some("other")), "service", SUITE_TIME),
            Err(Refusal::UnknownKey)
        );
    }

    /// A Bedrock InvokeModel request signed by botocore 1.43 (`SigV4Auth(creds, "bedrock",
    /// "us-west-2")` at 2024-01-15T09:30:00Z): the model id's `%3A` is signed as `%253A`.
    fn botocore_bedrock_request(token: Option<&str>, signature: &str) -> Request {
        let signed = if token.is_some() {
            "accept;content-type;host;x-amz-date;x-amz-security-token"
        } else {
            "accept;content-type;host;x-amz-date"
        };
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential=AKIAMOCKSWITCHYARD/20240115/us-west-2/bedrock/aws4_request, SignedHeaders={signed}, Signature={signature}"
        );
        let mut headers = vec![
            ("Host", "bedrock-runtime.us-west-2.amazonaws.com"),
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
            ("X-Amz-Date", "20240115T093000Z"),
            ("Authorization", auth.as_str()),
        ];
        if let Some(t) = token {
            headers.push(("X-Amz-Security-Token", t));
        }
        request(
            "POST",
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke",
            &headers,
            r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#,
        )
    }

    /// 2024-01-15T09:30:00Z.
    const BOTOCORE_TIME: i64 = 1_705_311_000;

    #[test]
    fn a_request_signed_by_botocore_verifies() {
        let creds = Credentials::default();
        let req = botocore_bedrock_request(None, "d4aa435c88f036b4cd2f690d92398b1706b58dafc7b41edb7e706d10011b45bf");
        let scope = verify(&req, &creds, "bedrock", BOTOCORE_TIME).unwrap();
        assert_eq!(scope.region, "us-west-2");
        let with_token = Credentials {
            session_token: Some("mock-session-token".into()),
            ..creds.clone()
        };
        let req = botocore_bedrock_request(
            Some("mock-session-token"),
            "5477f8131cc23fae473cd2287fd36dc76aa73335147439c7ff3541e0fe0f0c35",
        );
        assert!(verify(&req, &with_token, "bedrock", BOTOCORE_TIME).is_ok());
        // A path signed without the second encoding (`%3A` as is) is refused.
        let mut once = req.clone();
        once.target = "/model/anthropic.claude-3-haiku-20240307-v1:0/invoke".into();
        let Err(Refusal::Invalid(msg)) = verify(&once, &with_token, "bedrock", BOTOCORE_TIME) else {
            panic!("a different path must not verify");
        };
        assert!(msg.starts_with(MISMATCH), "{msg}");
        assert!(
            msg.contains("\n/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke\n"),
            "{msg}"
        );
    }

    #[test]
    fn refusals_in_aws_words() {
        let creds = Credentials::default();
        let good = botocore_bedrock_request(None, "d4aa435c88f036b4cd2f690d92398b1706b58dafc7b41edb7e706d10011b45bf");
        let with = |name: &str, value: Option<&str>| {
            let mut r = good.clone();
            r.headers.retain(|(k, _)| k != name);
            if let Some(v) = value {
                r.headers.push((name.to_string(), v.to_string()));
            }
            r
        };
        let check = |r: &Request, now: i64| verify(r, &creds, "bedrock", now);
        assert_eq!(
            check(&with("authorization", None), BOTOCORE_TIME),
            Err(Refusal::Missing)
        );
        let Err(Refusal::Incomplete(msg)) = check(&with("authorization", Some("Bearer abc")), BOTOCORE_TIME) else {
            panic!("a bearer token is no signature");
        };
        assert!(
            msg.starts_with("Authorization header requires 'Credential' parameter.")
                && msg.ends_with("Authorization=Bearer abc"),
            "{msg}"
        );
        assert!(matches!(
            check(&with("x-amz-date", None), BOTOCORE_TIME),
            Err(Refusal::Incomplete(m)) if m.contains("'X-Amz-Date'")
        ));
        let other_key = good
            .header("authorization")
            .unwrap()
            .replace("AKIAMOCKSWITCHYARD", "AKIAOTHER");
        assert_eq!(
            check(&with("authorization", Some(&other_key)), BOTOCORE_TIME),
            Err(Refusal::UnknownKey)
        );
        // A token the service does not expect.
        assert_eq!(
            check(&with("x-amz-security-token", Some("t")), BOTOCORE_TIME),
            Err(Refusal::UnknownKey)
        );
        // Six minutes either way.
        let Err(Refusal::Invalid(msg)) = check(&good, BOTOCORE_TIME + 360) else {
            panic!("a stale date must not verify");
        };
        assert_eq!(
            msg,
            "Signature expired: 20240115T093000Z is now earlier than 20240115T093100Z (20240115T093600Z - 5 min.)"
        );
        assert!(
            matches!(check(&good, BOTOCORE_TIME - 360), Err(Refusal::Invalid(m)) if m.starts_with("Signature not yet current"))
        );
        // Within five minutes is fine.
        assert!(check(&good, BOTOCORE_TIME + 299).is_ok());
        assert!(matches!(verify(&good, &creds, "s3", BOTOCORE_TIME), Err(Refusal::Invalid(m)) if m.contains("'s3'")));
        let unsigned_host = good.header("authorization").unwrap().replace("host;", "");
        assert!(matches!(
            check(&with("authorization", Some(&unsigned_host)), BOTOCORE_TIME),
            Err(Refusal::Incomplete(m)) if m.starts_with("'host' must be a 'SignedHeader'")
        ));
        let wrong_secret = Credentials {
            secret_access_key: "not-the-secret".into(),
            ..creds.clone()
        };
        assert!(
            matches!(verify(&good, &wrong_secret, "bedrock", BOTOCORE_TIME), Err(Refusal::Invalid(m)) if m.starts_with(MISMATCH))
        );
        let mut body = good.clone();
        body.body.push(b' ');
        assert!(matches!(check(&body, BOTOCORE_TIME), Err(Refusal::Invalid(_))));
        assert_eq!(Refusal::UnknownKey.error_type(), "UnrecognizedClientException");
    }

    #[test]
    fn canonical_parts() {
        assert_eq!(canonical_uri("/a/./b/../c//d/"), "/a/c/d/");
        assert_eq!(canonical_uri("/"), "/");
        assert_eq!(canonical_uri("/m/x%3A0/invoke"), "/m/x%253A0/invoke");
        assert_eq!(canonical_query("b=2&a=%7e&a=1&c"), "a=1&a=~&b=2&c=");
        assert_eq!(canonical_query("k=a+b c"), "k=a%2Bb%20c");
    }

    #[test]
    fn dates() {
        assert_eq!(parse_amz_date("20150830T123600Z"), Some(SUITE_TIME));
        assert_eq!(format_amz_date(SUITE_TIME), "20150830T123600Z");
        assert_eq!(format_amz_date(0), "19700101T000000Z");
        assert_eq!(
            parse_amz_date("20000229T235959Z").map(format_amz_date).as_deref(),
            Some("20000229T235959Z")
        );
        for bad in [
            "2015-08-30T12:36:00Z",
            "20151330T123600Z",
            "20150830T123600",
            "2015083aT123600Z",
            "",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }
}
