//! The `application/vnd.amazon.eventstream` framing (what Bedrock's `ConverseStream` and
//! `InvokeModelWithResponseStream` answer with), decoded incrementally: frames come out the same
//! however the bytes were split into reads.
//!
//! A frame: the prelude (total length, headers length, each a big-endian `u32`, then the CRC32 of
//! those 8 bytes), the headers, the payload, and the CRC32 of everything before it. A header: a
//! name (`u8` length, UTF-8), a value type (`u8`) and its value — 0/1 true/false (no value), 2 byte,
//! 3 short, 4 int, 5 long, 6 bytes (`u16` length), 7 string (`u16` length, UTF-8), 8 timestamp (ms,
//! `i64`), 9 UUID (16 bytes). CRC32 is the IEEE polynomial (zlib's). A frame that fails a CRC, is
//! shorter than 16 bytes or longer than [`MAX_FRAME_BYTES`], or whose headers do not fit it, is a
//! [`FrameError`]: the stream is malformed and the decoder refuses everything after it.

/// The longest frame accepted (the AWS event-stream libraries' cap); its prelude alone refuses a
/// longer one before any of it is buffered.
pub const MAX_FRAME_BYTES: u32 = 16 * 1024 * 1024;

/// The most header bytes a frame may carry (the AWS libraries' cap).
pub const MAX_HEADERS_BYTES: u32 = 128 * 1024;

/// Prelude (12 bytes) and message CRC (4): a frame with no headers and no payload.
const MIN_FRAME_BYTES: u32 = 16;

/// A header's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    Bool(bool),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Bytes(Vec<u8>),
    String(String),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub headers: Vec<(String, HeaderValue)>,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The string value of the header `name` (the first, if repeated).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, value)| match value {
                HeaderValue::String(s) => Some(s.as_str()),
                _ => None,
            })
    }

    /// `:message-type`: `event`, `exception` or `error`.
    pub fn message_type(&self) -> Option<&str> {
        self.header(":message-type")
    }

    /// `:event-type` of an event (`chunk`, `contentBlockDelta`, …).
    pub fn event_type(&self) -> Option<&str> {
        self.header(":event-type")
    }

    /// `:exception-type` of an exception (`throttlingException`, …); its payload is the
    /// exception's JSON.
    pub fn exception_type(&self) -> Option<&str> {
        self.header(":exception-type")
    }

    /// `:error-code` of an error.
    pub fn error_code(&self) -> Option<&str> {
        self.header(":error-code")
    }

    /// `:error-message` of an error.
    pub fn error_message(&self) -> Option<&str> {
        self.header(":error-message")
    }
}

/// Why the bytes are not an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The prelude's CRC does not match its lengths.
    PreludeCrc,
    /// The message CRC does not match the frame.
    MessageCrc,
    /// A total length below 16 bytes or above [`MAX_FRAME_BYTES`].
    Length(u32),
    /// A headers length above [`MAX_HEADERS_BYTES`] or past the frame's end.
    HeadersLength(u32),
    /// A header that does not parse.
    Header(&'static str),
    /// The stream ended inside a frame, with this many bytes of it.
    Truncated(usize),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::PreludeCrc => f.write_str("event stream frame: prelude CRC mismatch"),
            FrameError::MessageCrc => f.write_str("event stream frame: message CRC mismatch"),
            FrameError::Length(n) => write!(f, "event stream frame: total length {n} out of range"),
            FrameError::HeadersLength(n) => write!(f, "event stream frame: headers length {n} out of range"),
            FrameError::Header(why) => write!(f, "event stream frame: bad header ({why})"),
            FrameError::Truncated(n) => write!(f, "event stream ended inside a frame ({n} bytes)"),
        }
    }
}

/// Decodes frames from the reads of one stream.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Bytes of the frame not yet complete.
    buffer: Vec<u8>,
    /// The error that failed the stream: every later push returns it.
    failed: Option<FrameError>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Appends the frames that `bytes` complete to `out`, keeping the rest of a frame for the next
    /// push. On an error, the frames before the bad one are in `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Frame>) -> Result<(), FrameError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        self.buffer.extend_from_slice(bytes);
        let mut used = 0;
        let result = loop {
            match next_frame(self.buffer.get(used..).unwrap_or_default()) {
                Ok(Some((frame, len))) => {
                    out.push(frame);
                    used += len;
                }
                Ok(None) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        self.buffer.drain(..used);
        if let Err(error) = &result {
            self.failed = Some(error.clone());
            self.buffer = Vec::new();
        }
        result
    }

    /// Bytes held of a frame not yet complete.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// At the end of the stream: an error if it ended inside a frame.
    pub fn finish(&self) -> Result<(), FrameError> {
        match (&self.failed, self.buffer.len()) {
            (Some(error), _) => Err(error.clone()),
            (None, 0) => Ok(()),
            (None, held) => Err(FrameError::Truncated(held)),
        }
    }
}

/// The first frame of `bytes` and its length, or `None` when it is not all there yet. A bad
/// prelude is refused as soon as its 12 bytes are.
fn next_frame(bytes: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
    let Some(&[t0, t1, t2, t3, h0, h1, h2, h3, c0, c1, c2, c3]) = bytes.first_chunk::<12>() else {
        return Ok(None);
    };
    if crc32(&[t0, t1, t2, t3, h0, h1, h2, h3]) != u32::from_be_bytes([c0, c1, c2, c3]) {
        return Err(FrameError::PreludeCrc);
    }
    let total = u32::from_be_bytes([t0, t1, t2, t3]);
    let headers_len = u32::from_be_bytes([h0, h1, h2, h3]);
    if !(MIN_FRAME_BYTES..=MAX_FRAME_BYTES).contains(&total) {
        return Err(FrameError::Length(total));
    }
    if headers_len > MAX_HEADERS_BYTES || headers_len > total - MIN_FRAME_BYTES {
        return Err(FrameError::HeadersLength(headers_len));
    }
    let Some(frame) = bytes.get(..to_usize(total)) else {
        return Ok(None);
    };
    // Both splits hold: the lengths were checked against each other above.
    let Some((checked, &crc)) = frame.split_last_chunk::<4>() else {
        return Err(FrameError::Length(total));
    };
    if crc32(checked) != u32::from_be_bytes(crc) {
        return Err(FrameError::MessageCrc);
    }
    let Some((headers, payload)) = checked
        .get(12..)
        .and_then(|rest| rest.split_at_checked(to_usize(headers_len)))
    else {
        return Err(FrameError::HeadersLength(headers_len));
    };
    let frame = Frame {
        headers: parse_headers(headers)?,
        payload: payload.to_vec(),
    };
    Ok(Some((frame, to_usize(total))))
}

fn parse_headers(bytes: &[u8]) -> Result<Vec<(String, HeaderValue)>, FrameError> {
    let mut reader = Reader(bytes);
    let mut headers = Vec::new();
    while !reader.0.is_empty() {
        let [name_len] = reader.array()?;
        let name = utf8(reader.take(usize::from(name_len))?)?;
        let [kind] = reader.array()?;
        let value = match kind {
            0 => HeaderValue::Bool(true),
            1 => HeaderValue::Bool(false),
            2 => HeaderValue::Byte(i8::from_be_bytes(reader.array()?)),
            3 => HeaderValue::Short(i16::from_be_bytes(reader.array()?)),
            4 => HeaderValue::Int(i32::from_be_bytes(reader.array()?)),
            5 => HeaderValue::Long(i64::from_be_bytes(reader.array()?)),
            6 => HeaderValue::Bytes(reader.sized()?.to_vec()),
            7 => HeaderValue::String(utf8(reader.sized()?)?),
            8 => HeaderValue::Timestamp(i64::from_be_bytes(reader.array()?)),
            9 => HeaderValue::Uuid(reader.array()?),
            _ => return Err(FrameError::Header("unknown value type")),
        };
        headers.push((name, value));
    }
    Ok(headers)
}

/// The unread rest of a frame's headers.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], FrameError> {
        let Some((taken, rest)) = self.0.split_at_checked(len) else {
            return Err(FrameError::Header("runs past the headers"));
        };
        self.0 = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let Some((taken, rest)) = self.0.split_first_chunk::<N>() else {
            return Err(FrameError::Header("runs past the headers"));
        };
        self.0 = rest;
        Ok(*taken)
    }

    /// A value of `u16` length.
    fn sized(&mut self) -> Result<&'a [u8], FrameError> {
        let len = u16::from_be_bytes(self.array()?);
        self.take(usize::from(len))
    }
}

fn utf8(bytes: &[u8]) -> Result<String, FrameError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| FrameError::Header("not UTF-8"))
}

/// A length already checked against [`MAX_FRAME_BYTES`].
fn to_usize(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A frame as Bedrock encodes it (headers of string type), CRCs and all: what the tests and the
/// stream benchmark (`crates/bench`) decode. The Worker never encodes one.
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    let total = (12 + h.len() + payload.len() + 4) as u32;
    let mut out = Vec::new();
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out
}

/// CRC-32 with the IEEE polynomial, reflected (zlib's `crc32`).
fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |crc, &b| {
        CRC_TABLE[usize::from(crc.to_le_bytes()[0] ^ b)] ^ (crc >> 8)
    })
}

const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                0xEDB8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The AWS event-stream test suite's encoded messages, as botocore's
    /// `tests/unit/test_eventstream.py` carries them (CRCs computed by AWS, not here).
    const EMPTY: &[u8] = b"\x00\x00\x00\x10\x00\x00\x00\x00\x05\xc2H\xeb}\x98\xc8\xff";
    const INT8_HEADER: &[u8] = b"\x00\x00\x00\x17\x00\x00\x00\x07)\x86\x01X\x04byte\x02\xff\xc2\xf8i\xdc";
    const INT16_HEADER: &[u8] = b"\x00\x00\x00\x19\x00\x00\x00\x09q\x0e\x92>\x05short\x03\xff\xff\xb2|\xb6\xcc";
    const INT32_HEADER: &[u8] =
        b"\x00\x00\x00\x1d\x00\x00\x00\x0d\x83\xe3\xf0\xe7\x07integer\x04\xff\xff\xff\xff\x8b\x8e\x12\xeb";
    const INT64_HEADER: &[u8] =
        b"\x00\x00\x00\x1e\x00\x00\x00\x0e]J\xdb\x8d\x04long\x05\xff\xff\xff\xff\xff\xff\xff\xffK\xc22\xda";
    const PAYLOAD_NO_HEADERS: &[u8] = b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96";
    const PAYLOAD_ONE_STR_HEADER: &[u8] = b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10application/json{'foo':'bar'}\x8d\x9c\x08\xb1";
    const ALL_HEADER_TYPES: &[u8] = b"\x00\x00\x00b\x00\x00\x00R\x03\xb5\xcb\x9c\x010\x00\x011\x01\x012\x02\x02\x013\x03\x00\x03\x014\x04\x00\x00\x00\x04\x015\x05\x00\x00\x00\x00\x00\x00\x00\x05\x016\x06\x00\x05bytes\x017\x07\x00\x04utf8\x018\x08\x00\x00\x00\x00\x00\x00\x00\x08\x019\x090123456789abcdefc56q";
    const ERROR_MESSAGE: &[u8] = b"\x00\x00\x00R\x00\x00\x00B\xbf#c~\x0d:message-type\x07\x00\x05error\x0b:error-code\x07\x00\x04code\x0e:error-message\x07\x00\x07messagekl\xea=";

    const POSITIVE: &[&[u8]] = &[
        EMPTY,
        INT8_HEADER,
        INT16_HEADER,
        INT32_HEADER,
        INT64_HEADER,
        PAYLOAD_NO_HEADERS,
        PAYLOAD_ONE_STR_HEADER,
        ALL_HEADER_TYPES,
        ERROR_MESSAGE,
    ];

    fn string_header(name: &str, value: &str) -> Vec<u8> {
        let mut out = vec![u8::try_from(name.len()).unwrap()];
        out.extend_from_slice(name.as_bytes());
        out.push(7);
        out.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        out.extend_from_slice(value.as_bytes());
        out
    }

    /// A frame around raw header bytes, with CRCs of this module's [`crc32`].
    fn frame_bytes(headers: &[u8], payload: &[u8]) -> Vec<u8> {
        let total = u32::try_from(headers.len() + payload.len() + 16).unwrap();
        let mut out = total.to_be_bytes().to_vec();
        out.extend_from_slice(&u32::try_from(headers.len()).unwrap().to_be_bytes());
        out.extend_from_slice(&crc32(&out).to_be_bytes());
        out.extend_from_slice(headers);
        out.extend_from_slice(payload);
        out.extend_from_slice(&crc32(&out).to_be_bytes());
        out
    }

    fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        let headers: Vec<u8> = headers.iter().flat_map(|(n, v)| string_header(n, v)).collect();
        frame_bytes(&headers, payload)
    }

    /// A frame with this prelude and nothing after it (the prelude CRC right).
    fn prelude(total: u32, headers_len: u32) -> Vec<u8> {
        let mut out = total.to_be_bytes().to_vec();
        out.extend_from_slice(&headers_len.to_be_bytes());
        out.extend_from_slice(&crc32(&out).to_be_bytes());
        out
    }

    fn decode_chunks(chunks: &[&[u8]]) -> Result<Vec<Frame>, FrameError> {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk, &mut out)?;
        }
        decoder.finish()?;
        Ok(out)
    }

    fn decode_one(bytes: &[u8]) -> Frame {
        let frames = decode_chunks(&[bytes]).unwrap();
        assert_eq!(frames.len(), 1);
        frames.into_iter().next().unwrap()
    }

    fn s(value: &str) -> HeaderValue {
        HeaderValue::String(value.to_string())
    }

    /// A frame of string headers with its lengths and CRCs as given.
    fn known_frame(lengths: [u32; 2], prelude_crc: u32, headers: &[(&str, &str)], payload: &str, crc: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        for n in [lengths[0], lengths[1], prelude_crc] {
            bytes.extend_from_slice(&n.to_be_bytes());
        }
        for (name, value) in headers {
            bytes.extend(string_header(name, value));
        }
        bytes.extend_from_slice(payload.as_bytes());
        bytes.extend_from_slice(&crc.to_be_bytes());
        bytes
    }

    /// A Bedrock ConverseStream event and a mid-stream exception, with their CRCs from zlib.
    fn bedrock_frames() -> Vec<u8> {
        let event = known_frame(
            [159, 87],
            0xc37b_abff,
            &[
                (":event-type", "contentBlockDelta"),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            r#"{"contentBlockIndex":0,"delta":{"text":"Hi"},"p":"abcd"}"#,
            0xf2ac_e5ff,
        );
        let exception = known_frame(
            [178, 97],
            0x3590_d5d3,
            &[
                (":exception-type", "throttlingException"),
                (":content-type", "application/json"),
                (":message-type", "exception"),
            ],
            r#"{"message":"Too many requests, please wait before trying again."}"#,
            0xe8ff_b26a,
        );
        [event, exception].concat()
    }

    /// Every known frame, one after the other.
    fn sample_stream() -> Vec<u8> {
        let mut bytes = POSITIVE.concat();
        bytes.extend(bedrock_frames());
        bytes
    }

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
    }

    #[test]
    fn the_aws_suite_messages_decode() {
        let empty = decode_one(EMPTY);
        assert_eq!((empty.headers.len(), empty.payload.len()), (0, 0));
        assert_eq!(
            decode_one(INT8_HEADER).headers,
            vec![("byte".into(), HeaderValue::Byte(-1))]
        );
        assert_eq!(
            decode_one(INT16_HEADER).headers,
            vec![("short".into(), HeaderValue::Short(-1))]
        );
        assert_eq!(
            decode_one(INT32_HEADER).headers,
            vec![("integer".into(), HeaderValue::Int(-1))]
        );
        assert_eq!(
            decode_one(INT64_HEADER).headers,
            vec![("long".into(), HeaderValue::Long(-1))]
        );
        let frame = decode_one(PAYLOAD_NO_HEADERS);
        assert_eq!(
            (frame.headers.len(), frame.payload.as_slice()),
            (0, &b"{'foo':'bar'}"[..])
        );
        let frame = decode_one(PAYLOAD_ONE_STR_HEADER);
        assert_eq!(frame.header("content-type"), Some("application/json"));
        assert_eq!(frame.payload, b"{'foo':'bar'}");
        assert_eq!(
            decode_one(ALL_HEADER_TYPES).headers,
            vec![
                ("0".into(), HeaderValue::Bool(true)),
                ("1".into(), HeaderValue::Bool(false)),
                ("2".into(), HeaderValue::Byte(2)),
                ("3".into(), HeaderValue::Short(3)),
                ("4".into(), HeaderValue::Int(4)),
                ("5".into(), HeaderValue::Long(5)),
                ("6".into(), HeaderValue::Bytes(b"bytes".to_vec())),
                ("7".into(), s("utf8")),
                ("8".into(), HeaderValue::Timestamp(8)),
                ("9".into(), HeaderValue::Uuid(*b"0123456789abcdef")),
            ]
        );
        let error = decode_one(ERROR_MESSAGE);
        assert_eq!(error.message_type(), Some("error"));
        assert_eq!(error.error_code(), Some("code"));
        assert_eq!(error.error_message(), Some("message"));
        assert_eq!(error.event_type(), None);
        // All of them in one stream.
        assert_eq!(decode_chunks(&[&POSITIVE.concat()]).unwrap().len(), POSITIVE.len());
    }

    #[test]
    fn bedrock_frames_decode_with_their_helpers() {
        let frames = decode_chunks(&[&bedrock_frames()]).unwrap();
        let [event, exception] = frames.as_slice() else {
            panic!("{frames:?}");
        };
        assert_eq!(event.message_type(), Some("event"));
        assert_eq!(event.event_type(), Some("contentBlockDelta"));
        assert_eq!(event.header(":content-type"), Some("application/json"));
        assert_eq!(
            event.payload,
            br#"{"contentBlockIndex":0,"delta":{"text":"Hi"},"p":"abcd"}"#
        );
        assert_eq!(exception.message_type(), Some("exception"));
        assert_eq!(exception.exception_type(), Some("throttlingException"));
        assert_eq!(exception.event_type(), None);
        // The test encoder agrees with zlib's CRCs.
        assert_eq!(
            encode(
                &[
                    (":event-type", "contentBlockDelta"),
                    (":content-type", "application/json"),
                    (":message-type", "event")
                ],
                br#"{"contentBlockIndex":0,"delta":{"text":"Hi"},"p":"abcd"}"#
            ),
            bedrock_frames()[..159]
        );
    }

    #[test]
    fn the_aws_suite_corruptions_are_refused() {
        let cases: [(&[u8], FrameError); 4] = [
            // The length's first byte changed: the prelude CRC no longer holds.
            (b"\x01\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96", FrameError::PreludeCrc),
            (b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'\x8d\xc3e96", FrameError::MessageCrc),
            (b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent+type\x07\x00\x10application/json{'foo':'bar'}\x8d\x9c\x08\xb1", FrameError::MessageCrc),
            (b"\x00\x00\x00=\xff\x00\x01\x02\x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10application/json{'foo':'bar'}\x8d\x9c\x08\xb1", FrameError::PreludeCrc),
        ];
        for (bytes, error) in cases {
            assert_eq!(decode_chunks(&[bytes]), Err(error));
        }
        // A flipped CRC byte of each kind on a good frame.
        let mut bytes = PAYLOAD_ONE_STR_HEADER.to_vec();
        bytes[9] ^= 1;
        assert_eq!(decode_chunks(&[&bytes]), Err(FrameError::PreludeCrc));
        let mut bytes = PAYLOAD_ONE_STR_HEADER.to_vec();
        *bytes.last_mut().unwrap() ^= 0x80;
        assert_eq!(decode_chunks(&[&bytes]), Err(FrameError::MessageCrc));
    }

    #[test]
    fn lengths_out_of_range_are_refused_from_the_prelude_alone() {
        let mut out = Vec::new();
        for total in [0, 15, MAX_FRAME_BYTES + 1, u32::MAX] {
            let mut decoder = Decoder::new();
            assert_eq!(
                decoder.push(&prelude(total, 0), &mut out),
                Err(FrameError::Length(total)),
                "{total}"
            );
        }
        let mut decoder = Decoder::new();
        assert_eq!(
            decoder.push(&prelude(40, 25), &mut out),
            Err(FrameError::HeadersLength(25))
        );
        let mut decoder = Decoder::new();
        let too_many = MAX_HEADERS_BYTES + 1;
        assert_eq!(
            decoder.push(&prelude(too_many + 16, too_many), &mut out),
            Err(FrameError::HeadersLength(too_many))
        );
        // The largest frame is waited for, not refused.
        let mut decoder = Decoder::new();
        assert_eq!(decoder.push(&prelude(MAX_FRAME_BYTES, 0), &mut out), Ok(()));
        assert_eq!(decoder.buffered(), 12);
        assert!(out.is_empty());
    }

    #[test]
    fn headers_that_do_not_parse_are_refused() {
        let cases: [(&[u8], &str); 6] = [
            (b"\x05short", "runs past the headers"),
            (b"\x04name\x07\x00\x09short", "runs past the headers"),
            (b"\x04name\x04\x00\x00", "runs past the headers"),
            (b"\x04name", "runs past the headers"),
            (b"\x04name\x0a", "unknown value type"),
            (b"\x02\xff\xfe\x00", "not UTF-8"),
        ];
        for (headers, why) in cases {
            assert_eq!(
                decode_chunks(&[&frame_bytes(headers, b"payload")]),
                Err(FrameError::Header(why)),
                "{headers:?}"
            );
        }
        let bad_string = frame_bytes(b"\x01k\x07\x00\x02\xc3\x28", b"");
        assert_eq!(decode_chunks(&[&bad_string]), Err(FrameError::Header("not UTF-8")));
    }

    #[test]
    fn a_failed_stream_stays_failed_and_keeps_the_frames_before() {
        let mut bytes = EMPTY.to_vec();
        bytes.extend_from_slice(&prelude(3, 0));
        bytes.extend_from_slice(EMPTY);
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        assert_eq!(decoder.push(&bytes, &mut out), Err(FrameError::Length(3)));
        assert_eq!(out.len(), 1);
        assert_eq!(decoder.push(EMPTY, &mut out), Err(FrameError::Length(3)));
        assert_eq!(decoder.finish(), Err(FrameError::Length(3)));
        assert_eq!((out.len(), decoder.buffered()), (1, 0));
    }

    #[test]
    fn a_stream_that_ends_inside_a_frame_is_truncated() {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        decoder.push(&PAYLOAD_ONE_STR_HEADER[..20], &mut out).unwrap();
        assert_eq!(decoder.finish(), Err(FrameError::Truncated(20)));
        decoder.push(&PAYLOAD_ONE_STR_HEADER[20..], &mut out).unwrap();
        assert_eq!((decoder.finish(), out.len()), (Ok(()), 1));
    }

    #[test]
    fn any_single_cut_and_byte_by_byte_give_the_same_frames() {
        let stream = sample_stream();
        let whole = decode_chunks(&[&stream]).unwrap();
        assert_eq!(whole.len(), POSITIVE.len() + 2);
        for cut in 0..=stream.len() {
            assert_eq!(
                decode_chunks(&[&stream[..cut], &stream[cut..]]).unwrap(),
                whole,
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(decode_chunks(&bytes).unwrap(), whole);
    }

    fn cut(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for point in points.into_iter().chain([bytes.len()]) {
            chunks.push(bytes[at..point].to_vec());
            at = point;
        }
        chunks
    }

    fn decode_cut(bytes: &[u8], cuts: &[usize]) -> Result<Vec<Frame>, FrameError> {
        let chunks = cut(bytes, cuts);
        let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        decode_chunks(&chunks)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn frames_decode_the_same_however_the_stream_is_split(
            frames in prop::collection::vec(
                (prop::collection::vec(("[:a-z-]{1,12}", "[ -~]{0,24}"), 0..4), prop::collection::vec(any::<u8>(), 0..64)),
                1..6,
            ),
            cuts in prop::collection::vec(any::<usize>(), 0..12),
        ) {
            let mut stream = Vec::new();
            let mut expected = Vec::new();
            for (headers, payload) in &frames {
                let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                stream.extend(encode(&pairs, payload));
                expected.push(Frame {
                    headers: headers.iter().map(|(n, v)| (n.clone(), s(v))).collect(),
                    payload: payload.clone(),
                });
            }
            prop_assert_eq!(decode_cut(&stream, &cuts), Ok(expected));
            let known = sample_stream();
            prop_assert_eq!(decode_cut(&known, &cuts), decode_chunks(&[&known]));
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            let whole = decode_chunks(&[&bytes]);
            prop_assert_eq!(decode_cut(&bytes, &cuts), whole);
        }

        /// Arbitrary headers and payloads inside frames whose CRCs hold, so the header parser
        /// sees them.
        #[test]
        fn arbitrary_headers_never_panic(
            headers in prop::collection::vec(any::<u8>(), 0..256),
            payload in prop::collection::vec(any::<u8>(), 0..32),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            let bytes = frame_bytes(&headers, &payload);
            let whole = decode_chunks(&[&bytes]);
            if let Ok(frames) = &whole {
                prop_assert_eq!(frames.len(), 1);
                prop_assert_eq!(&frames[0].payload, &payload);
            }
            prop_assert_eq!(decode_cut(&bytes, &cuts), whole);
        }
    }
}
