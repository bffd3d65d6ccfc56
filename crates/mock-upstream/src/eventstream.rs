//! The `application/vnd.amazon.eventstream` binary framing AWS streams answers in (Bedrock's
//! InvokeModelWithResponseStream among them): one self-delimiting message per event.
//!
//! ```text
//! message  := prelude headers payload message_crc
//! prelude  := total_length:u32be headers_length:u32be prelude_crc:u32be
//! header   := name_length:u8 name value_type:u8 value     (only type 7, string: len:u16be bytes)
//! ```
//!
//! `total_length` counts every byte of the message, the 12 of the prelude and the 4 of the
//! closing CRC included; `prelude_crc` is the CRC-32 of the first 8 bytes and `message_crc` the
//! CRC-32 of everything before it (both IEEE, as [`crate::crypto::crc32`]).

use crate::crypto::crc32;

/// The value type of a string header.
pub const STRING: u8 = 7;

/// One message with string `headers` (in order) and `payload`.
///
/// A header name longer than 255 bytes or a value longer than 65535 is cut there (the mock's
/// are short constants).
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut head = Vec::new();
    for (name, value) in headers {
        let name = &name.as_bytes()[..name.len().min(usize::from(u8::MAX))];
        let value = &value.as_bytes()[..value.len().min(usize::from(u16::MAX))];
        head.push(name.len() as u8);
        head.extend_from_slice(name);
        head.push(STRING);
        head.extend_from_slice(&(value.len() as u16).to_be_bytes());
        head.extend_from_slice(value);
    }
    let total = 12 + head.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(head.len() as u32).to_be_bytes());
    let prelude_crc = crc32(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    let message_crc = crc32(&out);
    out.extend_from_slice(&message_crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_message_vector() {
        // aws-c-event-stream's `encoded/positive/empty_message`.
        assert_eq!(
            frame(&[], b""),
            [0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x05, 0xc2, 0x48, 0xeb, 0x7d, 0x98, 0xc8, 0xff]
        );
    }

    #[test]
    fn headers_and_payload_are_laid_out_as_specified() {
        let f = frame(&[(":event-type", "chunk")], b"{}");
        let header_len = 1 + 11 + 1 + 2 + 5;
        assert_eq!(f.len(), 12 + header_len + 2 + 4);
        assert_eq!(&f[..4], (f.len() as u32).to_be_bytes());
        assert_eq!(&f[4..8], (header_len as u32).to_be_bytes());
        assert_eq!(&f[8..12], crc32(&f[..8]).to_be_bytes());
        assert_eq!(
            &f[12..],
            b"\x0b:event-type\x07\x00\x05chunk{}"
                .iter()
                .chain(&crc32(&f[..f.len() - 4]).to_be_bytes())
                .copied()
                .collect::<Vec<u8>>()
        );
    }
}
