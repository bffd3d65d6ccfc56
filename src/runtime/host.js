// The JS half of src/runtime (clock.rs, abort.rs, sign.rs): the runtime calls that may be refused
// where no request is being served (a task polled outside its request, see `clock::in_request`). Each catches
// the refusal and answers with a value instead, so nothing throws into Wasm; and each is one call
// across the boundary, where looking the function up and applying it from Rust took several.

const noop = () => {};

/// `setTimeout(handler, ms)`'s id, or `undefined` where timers are refused.
export function setTimer(handler, ms) {
  try {
    return setTimeout(handler, ms);
  } catch {
    return undefined;
  }
}

/// `clearTimeout(id)`; false where it was refused.
export function clearTimer(id) {
  try {
    clearTimeout(id);
    return true;
  } catch {
    return false;
  }
}

/// Whether the runtime serves a request here: it allows a timer.
export function inRequest() {
  try {
    clearTimeout(setTimeout(noop, 0));
    return true;
  } catch {
    return false;
  }
}

/// A new `AbortController`, or `undefined`.
export function newAbortController() {
  try {
    return new AbortController();
  } catch {
    return undefined;
  }
}

/// `controller.signal`, or `undefined`.
export function signalOf(controller) {
  try {
    return controller.signal;
  } catch {
    return undefined;
  }
}

/// `controller.abort()`, a refusal ignored.
export function abortFetch(controller) {
  try {
    controller.abort();
  } catch {
    // nothing to abort, or not allowed here
  }
}

/// A promise that settles when `signal` aborts (at once if it has); one that never settles where
/// the signal cannot be watched.
export function whenAborted(signal) {
  try {
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
  } catch {
    return new Promise(noop);
  }
}

/// A reader locked to `stream`, or `undefined`.
export function readerOf(stream) {
  try {
    return stream.getReader();
  } catch {
    return undefined;
  }
}

/// The next chunk: a promise of its bytes, of `undefined` at the end; rejected when the body broke.
export function readChunk(reader) {
  try {
    return reader.read().then((r) => (r.done ? undefined : r.value));
  } catch (e) {
    return Promise.reject(e);
  }
}

/// The body up to `cap` bytes, read here on the request's own promises: a promise of
/// `[bytes, whole]` (`whole`: that was all of it; if not, the rest is left unread); rejected when
/// the body broke.
export async function readUpTo(reader, cap) {
  const chunks = [];
  let size = 0;
  let whole = true;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (size + value.byteLength > cap) {
      chunks.push(value.subarray(0, cap - size));
      size = cap;
      whole = false;
      break;
    }
    chunks.push(value);
    size += value.byteLength;
  }
  if (chunks.length === 1) return [chunks[0], whole];
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.byteLength;
  }
  return [bytes, whole];
}

/// RS256 (RSASSA-PKCS1-v1_5 with SHA-256) of the bytes `data` by the PKCS#8 private key `pkcs8`,
/// through WebCrypto: a promise of the signature's bytes, or of `undefined` when the key cannot be
/// imported or the runtime refuses.
export async function signRs256(pkcs8, data) {
  try {
    const algorithm = { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" };
    const key = await crypto.subtle.importKey("pkcs8", pkcs8, algorithm, false, ["sign"]);
    return new Uint8Array(await crypto.subtle.sign(algorithm.name, key, data));
  } catch {
    return undefined;
  }
}
