//! RSA signature verification for the Vertex fake's token endpoint: a service account's public
//! key read from its PEM (`-----BEGIN PUBLIC KEY-----`, X.509 SubjectPublicKeyInfo DER), and an
//! RS256 signature (RSASSA-PKCS1-v1_5 with SHA-256, RFC 8017 §8.2.2) checked against it — with
//! the few big-number operations that takes (`s^e mod n`), written here so the crate keeps its
//! two dependencies. Also base64 decoding (standard and URL-safe, padding optional), which PEM
//! and JWTs need. Nothing here is meant to be fast or constant-time: it checks test signatures.

use crate::crypto::sha256;

/// An RSA public key: modulus and exponent, big-endian without leading zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    n: Vec<u8>,
    e: Vec<u8>,
}

/// `rsaEncryption`'s object identifier, 1.2.840.113549.1.1.1, as DER.
const RSA_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
/// The DER `DigestInfo` prefix of a SHA-256 digest (RFC 8017 §9.2, note 1).
const SHA256_DIGEST_INFO: &[u8] = &[
    0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20,
];

impl PublicKey {
    /// The key in a `PUBLIC KEY` PEM (what `openssl pkey -pubout` writes).
    pub fn from_pem(pem: &str) -> Result<PublicKey, String> {
        let inner = pem
            .trim()
            .strip_prefix("-----BEGIN PUBLIC KEY-----")
            .and_then(|rest| rest.trim_end().strip_suffix("-----END PUBLIC KEY-----"))
            .ok_or("not a PUBLIC KEY PEM")?;
        let der = base64_decode(inner).ok_or("the PEM's body is not base64")?;
        PublicKey::from_spki(&der)
    }

    /// SubjectPublicKeyInfo: `SEQUENCE { SEQUENCE { OID rsaEncryption, NULL }, BIT STRING {
    /// SEQUENCE { INTEGER n, INTEGER e } } }`.
    pub fn from_spki(der: &[u8]) -> Result<PublicKey, String> {
        let (spki, _) = tlv(der, 0x30)?;
        let (algorithm, rest) = tlv(spki, 0x30)?;
        let (oid, _) = tlv(algorithm, 0x06)?;
        if oid != RSA_OID {
            return Err("not an RSA key".into());
        }
        let (bits, _) = tlv(rest, 0x03)?;
        let key = bits.strip_prefix(&[0]).ok_or("a bit string with unused bits")?;
        let (key, _) = tlv(key, 0x30)?;
        let (n, rest) = tlv(key, 0x02)?;
        let (e, _) = tlv(rest, 0x02)?;
        let trim = |x: &[u8]| {
            x.iter()
                .position(|&b| b != 0)
                .map_or_else(Vec::new, |i| x[i..].to_vec())
        };
        let (n, e) = (trim(n), trim(e));
        if n.len() < 64 || e.is_empty() {
            return Err("a modulus or exponent too small".into());
        }
        Ok(PublicKey { n, e })
    }

    /// Whether `signature` is this key's RS256 signature of `message`.
    pub fn verify_rs256(&self, message: &[u8], signature: &[u8]) -> bool {
        let k = self.n.len();
        if signature.len() != k {
            return false;
        }
        let n = Big::from_be(&self.n);
        let s = Big::from_be(signature);
        if s.cmp(&n) != std::cmp::Ordering::Less {
            return false;
        }
        let m = s.pow_mod(&self.e, &n).to_be(k);
        let mut expected = vec![0x00, 0x01];
        let t_len = SHA256_DIGEST_INFO.len() + 32;
        if k < t_len + 11 {
            return false;
        }
        expected.resize(k - t_len - 1, 0xff);
        expected.push(0x00);
        expected.extend_from_slice(SHA256_DIGEST_INFO);
        expected.extend_from_slice(&sha256(message));
        m == expected
    }
}

/// One DER element of type `tag` at the start of `der`: its contents and what follows it.
fn tlv(der: &[u8], tag: u8) -> Result<(&[u8], &[u8]), String> {
    let bad = || format!("malformed DER (expected tag {tag:#04x})");
    if der.first() != Some(&tag) {
        return Err(bad());
    }
    let first = *der.get(1).ok_or_else(bad)?;
    let (len, start): (usize, usize) = match first {
        0..=0x7f => (usize::from(first), 2),
        0x81 => (usize::from(*der.get(2).ok_or_else(bad)?), 3),
        0x82 => {
            let hi = usize::from(*der.get(2).ok_or_else(bad)?);
            let lo = usize::from(*der.get(3).ok_or_else(bad)?);
            ((hi << 8) | lo, 4)
        }
        _ => return Err(bad()),
    };
    let end = start.checked_add(len).filter(|&e| e <= der.len()).ok_or_else(bad)?;
    Ok((&der[start..end], &der[end..]))
}

/// A non-negative integer, 32-bit limbs, least significant first, no high zero limbs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_be(bytes: &[u8]) -> Big {
        let mut limbs = Vec::with_capacity(bytes.len() / 4 + 1);
        for chunk in bytes.rchunks(4) {
            let mut limb = 0u32;
            for &b in chunk {
                limb = (limb << 8) | u32::from(b);
            }
            limbs.push(limb);
        }
        Big(limbs).normalized()
    }

    /// Big-endian in exactly `len` bytes (the value fits: it is below the modulus).
    fn to_be(&self, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        for (i, limb) in self.0.iter().enumerate() {
            for (j, b) in limb.to_le_bytes().iter().enumerate() {
                let at = i * 4 + j;
                if at < len {
                    out[len - 1 - at] = *b;
                }
            }
        }
        out
    }

    fn normalized(mut self) -> Big {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self
    }

    fn bits(&self) -> usize {
        match self.0.last() {
            Some(top) => (self.0.len() - 1) * 32 + (32 - top.leading_zeros() as usize),
            None => 0,
        }
    }

    fn bit(&self, i: usize) -> bool {
        self.0.get(i / 32).is_some_and(|limb| (limb >> (i % 32)) & 1 == 1)
    }

    fn cmp(&self, other: &Big) -> std::cmp::Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn mul(&self, other: &Big) -> Big {
        let mut out = vec![0u32; self.0.len() + other.0.len()];
        for (i, &a) in self.0.iter().enumerate() {
            let mut carry = 0u64;
            for (j, &b) in other.0.iter().enumerate() {
                let t = u64::from(a) * u64::from(b) + u64::from(out[i + j]) + carry;
                out[i + j] = t as u32;
                carry = t >> 32;
            }
            let mut k = i + other.0.len();
            while carry > 0 {
                let t = u64::from(out[k]) + carry;
                out[k] = t as u32;
                carry = t >> 32;
                k += 1;
            }
        }
        Big(out).normalized()
    }

    /// `self - other`, `other` not larger.
    fn sub_assign(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let t = i64::from(self.0[i]) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            self.0[i] = t.rem_euclid(1 << 32) as u32;
            borrow = i64::from(t < 0);
        }
        let normalized = std::mem::take(&mut self.0);
        *self = Big(normalized).normalized();
    }

    /// `(self << 1) | bit`.
    fn shl1_or(&mut self, bit: bool) {
        let mut carry = u32::from(bit);
        for limb in &mut self.0 {
            let next = *limb >> 31;
            *limb = (*limb << 1) | carry;
            carry = next;
        }
        if carry > 0 {
            self.0.push(carry);
        }
    }

    /// `self mod m`, bit by bit.
    fn rem(&self, m: &Big) -> Big {
        let mut r = Big(Vec::new());
        for i in (0..self.bits()).rev() {
            r.shl1_or(self.bit(i));
            if r.cmp(m) != std::cmp::Ordering::Less {
                r.sub_assign(m);
            }
        }
        r
    }

    /// `self^e mod m` (`e` big-endian bytes), square and multiply.
    fn pow_mod(&self, e: &[u8], m: &Big) -> Big {
        let mut result = Big(vec![1]);
        let base = self.rem(m);
        for byte in e {
            for i in (0..8).rev() {
                result = result.mul(&result).rem(m);
                if (byte >> i) & 1 == 1 {
                    result = result.mul(&base).rem(m);
                }
            }
        }
        result
    }
}

/// Base64 of either alphabet (`+/` or `-_`), padding and whitespace ignored; `None` for anything
/// else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut n = 0;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' | b' ' | b'\n' | b'\r' | b'\t' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((acc >> n) as u8);
            acc &= (1 << n) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::base64;

    /// A 1024-bit test key (`openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024`), its
    /// public half, and its RS256 signature of "switchyard" (`openssl dgst -sha256 -sign`).
    const PUBLIC_PEM: &str = include_str!("../tests/data/rsa1024.pub.pem");
    const SIGNATURE_B64: &str = include_str!("../tests/data/rsa1024.switchyard.sig.b64");

    #[test]
    fn base64_both_alphabets_padding_optional() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"foob", b"\xfb\xff\xfe"] {
            let standard = base64(data);
            assert_eq!(base64_decode(&standard).unwrap(), data);
            let url = standard.trim_end_matches('=').replace('+', "-").replace('/', "_");
            assert_eq!(base64_decode(&url).unwrap(), data);
        }
        assert!(base64_decode("a*b").is_none());
    }

    #[test]
    fn big_numbers_multiply_reduce_and_exponentiate() {
        let a = Big::from_be(&[0x01, 0x00, 0x00, 0x00, 0x01]);
        assert_eq!(a.0, vec![1, 1]);
        assert_eq!(a.to_be(6), vec![0, 1, 0, 0, 0, 1]);
        let m = Big::from_be(&1_000_000_007u64.to_be_bytes());
        // 3^(2^20) mod 1e9+7 computed with u128.
        let mut want: u128 = 3;
        for _ in 0..20 {
            want = want * want % 1_000_000_007;
        }
        let e = (1u32 << 20).to_be_bytes();
        let got = Big::from_be(&[3]).pow_mod(&e, &m);
        assert_eq!(got, Big::from_be(&(want as u64).to_be_bytes()));
        let x = Big::from_be(&u64::MAX.to_be_bytes());
        let square = x.mul(&x);
        assert_eq!(
            square.to_be(16),
            (u128::from(u64::MAX) * u128::from(u64::MAX)).to_be_bytes()
        );
    }

    #[test]
    fn an_rs256_signature_holds_only_for_its_message_and_key() {
        let key = PublicKey::from_pem(PUBLIC_PEM).unwrap();
        assert_eq!(key.e, vec![0x01, 0x00, 0x01]);
        assert_eq!(key.n.len(), 128);
        let signature = base64_decode(SIGNATURE_B64.trim()).unwrap();
        assert!(key.verify_rs256(b"switchyard", &signature));
        assert!(!key.verify_rs256(b"switchyarD", &signature), "another message");
        let mut flipped = signature.clone();
        flipped[77] ^= 1;
        assert!(!key.verify_rs256(b"switchyard", &flipped), "a changed signature");
        assert!(!key.verify_rs256(b"switchyard", &signature[1..]), "a short one");
        let mut other = key.clone();
        other.n[100] ^= 0x10;
        assert!(!other.verify_rs256(b"switchyard", &signature), "another key");
        assert!(PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nMAA=\n-----END PUBLIC KEY-----").is_err());
    }
}
