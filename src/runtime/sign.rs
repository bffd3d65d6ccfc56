//! Signing with a private key through WebCrypto (`crypto.subtle`, in `host.js`): RS256, what a
//! Vertex service account's JWT is signed with (SPEC §20). The key is imported for each signature
//! and never kept.

use js_sys::{Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen(module = "/src/runtime/host.js")]
extern "C" {
    #[wasm_bindgen(js_name = signRs256)]
    fn sign_rs256(pkcs8: &Uint8Array, data: &Uint8Array) -> Promise;
}

/// The RS256 signature of `data` by the PKCS#8 DER private key `pkcs8`; `None` when the key is
/// not an RSA key WebCrypto imports (or the runtime refuses).
pub async fn rs256(pkcs8: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    let signed = JsFuture::from(sign_rs256(&Uint8Array::from(pkcs8), &Uint8Array::from(data)))
        .await
        .ok()?;
    signed.dyn_into::<Uint8Array>().ok().map(|bytes| bytes.to_vec())
}
