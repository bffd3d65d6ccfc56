// The post-commit relay loop (SPEC §7), the JS half of src/relay.rs. It runs in JS so that nothing
// in Rust is polled per chunk: each upstream chunk goes to the Rust half (`core`, a `RelayCore`) in
// one synchronous call and is forwarded to the client as it is, unless the core hands back other
// bytes. Timers (idle, stream cap, disconnect grace) and the client's departure are watched here;
// every decision about the bytes is Rust's. The loop runs on the request's own promises, so it is
// never polled outside its request. Nothing here throws: every runtime call that can fail is caught.

const END_WAIT_MS = 1000; // after the stream is over, how long the upstream may take to close
const QUEUED_CHUNKS = 16; // chunks queued for a client that is not reading before the upstream waits
const TIMEOUT = Symbol("timeout");
const ROOM = Symbol("room");
const GONE = Symbol("gone");

/// Starts relaying `core.reader` to a new client stream, `core.head()` first. Returns
/// [client ReadableStream, Promise]; the promise settles when nothing more will be read, after
/// `core.finished(upstreamEnded)`.
export function relay(core) {
  const { reader, abortController, idleMs, capMs, graceMs, clientSignal } = core;
  let client = null;
  let goneAt = 0;
  // The current wait's resolver (see `raceBefore`): a departure ends the wait at once. No promise
  // outlives one wait — a long-lived one raced on every read would keep a reaction per chunk.
  let expire = null;
  const leave = () => {
    if (!goneAt) {
      goneAt = Date.now();
      if (expire) expire(GONE);
    }
  };
  // The client's request signal aborts when it disconnects — also while nothing is being written
  // to it (a body stream is only cancelled when a write fails).
  try {
    if (clientSignal) {
      if (clientSignal.aborted) leave();
      else clientSignal.addEventListener("abort", leave);
    }
  } catch {
    // no signal to watch: a departure is noticed when a write fails
  }
  // Backpressure (SPEC §15): the upstream is read on only while the client's queue has room; a
  // client that does not read stops the reading, not fills the memory — and one that reads nothing
  // for the idle timeout counts as gone.
  let roomWaiter = null;
  const body = new ReadableStream(
    {
      start(controller) {
        client = controller;
      },
      pull() {
        if (roomWaiter) {
          const resolve = roomWaiter;
          roomWaiter = null;
          resolve(ROOM);
        }
      },
      cancel() {
        leave();
      },
    },
    new CountQueuingStrategy({ highWaterMark: QUEUED_CHUNKS }),
  );
  let closed = false; // the upstream body ended on its own
  let clientDone = false; // the client's stream is closed: nothing more is sent
  // Closed even once the client is marked gone: a client that stopped reading must see its
  // connection end, never hang open (SPEC §18).
  const closeClient = () => {
    if (clientDone) return;
    clientDone = true;
    try {
      client.close();
    } catch {
      // the client is gone already
    }
  };
  const send = (bytes) => {
    if (goneAt || clientDone || bytes.byteLength === 0) return;
    try {
      client.enqueue(bytes);
    } catch {
      leave();
    }
  };

  // Waits race the pending read against one timer for all of them: set for the current deadline
  // and, when it fires early (the deadline moved later since, e.g. data came), set again for the
  // rest. A read does not touch it, so a stream costs a timer per idle window, not one per read.
  let pendingRead = null;
  let timer = null;
  let timerAt = Infinity;
  let deadlineAt = Infinity;
  const onTimer = () => {
    timer = null;
    timerAt = Infinity;
    if (Date.now() >= deadlineAt) {
      if (expire) expire(TIMEOUT);
    } else {
      armFor(deadlineAt);
    }
  };
  const armFor = (at) => {
    if (timer !== null && timerAt <= at) return; // it fires no later, and checks again then
    if (timer !== null) clearTimeout(timer);
    timerAt = at;
    timer = setTimeout(onTimer, Math.max(at - Date.now(), 1));
  };
  // What `p` resolves to, TIMEOUT once `at` (ms since the epoch) has passed, or GONE when the
  // client leaves first.
  const raceBefore = (p, at) => {
    deadlineAt = at;
    armFor(at);
    return Promise.race([p, new Promise((resolve) => (expire = resolve))]).then((r) => {
      expire = null;
      return r;
    });
  };
  // The next chunk ({value} | {done} | {error}), or TIMEOUT / GONE as above.
  const readBefore = (at) => {
    if (!pendingRead) {
      pendingRead = reader.read().then(
        (r) => r,
        (error) => ({ error }),
      );
    }
    return raceBefore(pendingRead, at).then((r) => {
      if (r !== TIMEOUT && r !== GONE) pendingRead = null;
      return r;
    });
  };
  // Whether the client's queue is full (then the upstream waits).
  const clientFull = () => !goneAt && !clientDone && client.desiredSize !== null && client.desiredSize <= 0;

  // Relays until the stream is over; true when the upstream finished (nothing left to abort).
  const pump = async () => {
    const capAt = Date.now() + capMs;
    let lastData = Date.now();
    for (;;) {
      if (goneAt && graceMs === 0) return false;
      if (clientFull()) {
        // A client that takes nothing for `idleMs` is gone, whether or not the runtime said so
        // (a departure is not always signalled): the disconnect grace applies from then.
        const stalledAt = Date.now() + idleMs;
        const r = await raceBefore(new Promise((resolve) => (roomWaiter = resolve)), Math.min(capAt, stalledAt));
        roomWaiter = null;
        if (r === TIMEOUT && Date.now() >= capAt) {
          send(core.overCap()); // queued behind what the client has not read
          return false;
        }
        if (r === TIMEOUT) leave();
        lastData = Date.now(); // the upstream was not being read: its silence did not count
        continue;
      }
      let at = Math.min(lastData + idleMs, capAt);
      if (goneAt) at = Math.min(at, goneAt + graceMs);
      const r = await readBefore(at);
      if (r === GONE) continue;
      if (r === TIMEOUT) {
        // The client left and the upstream did not finish within the grace window: stop quietly.
        if (goneAt && Date.now() >= goneAt + graceMs) return false;
        send(Date.now() >= capAt ? core.overCap() : core.idle());
        return false;
      }
      if (r.error !== undefined) {
        send(core.cut());
        return true;
      }
      if (r.done) {
        closed = true;
        send(core.close());
        return true;
      }
      lastData = Date.now();
      const other = core.push(r.value);
      if (other === undefined) {
        send(r.value);
        continue;
      }
      send(other);
      if (core.over) {
        await readToEnd();
        return true;
      }
    }
  };

  // The stream is over (its last event came): end the client's stream now, then read what is
  // left of the upstream body — usually only its end — so its connection can be reused rather
  // than torn down by a cancel.
  const readToEnd = async () => {
    closeClient();
    const until = Date.now() + Math.min(idleMs, END_WAIT_MS);
    while (Date.now() < until) {
      const r = await readBefore(until);
      if (r === TIMEOUT || r.error !== undefined) return;
      if (r.done) {
        closed = true;
        return;
      }
    }
  };

  const done = (async () => {
    let upstreamEnded = false;
    try {
      send(core.head());
      upstreamEnded = core.over;
      if (upstreamEnded) await readToEnd();
      else upstreamEnded = await pump();
    } catch {
      upstreamEnded = false;
    }
    closeClient();
    if (timer !== null) clearTimeout(timer);
    try {
      // The request's signal may outlive the relay: it must not keep the relay's state alive.
      if (clientSignal) clientSignal.removeEventListener("abort", leave);
    } catch {
      // nothing to remove
    }
    if (!upstreamEnded) {
      try {
        abortController.abort();
      } catch {
        // nothing left to abort
      }
    } else if (!closed) {
      try {
        reader.cancel().catch(() => {});
      } catch {
        // the body is closed already
      }
    }
    core.finished(upstreamEnded);
  })();
  return [body, done];
}
