// The JS floors for scripts/bench (issue 15): what any JavaScript gateway pays at least — parse the
// client's JSON body, replace `model`, serialise it again, send it to `UPSTREAM` + the same path,
// and answer with the upstream's response.
//
// - `GET /_echo`: answers "ok" without a subrequest (the runtime's own floor).
// - `POST /<path>`: the pass-through above; workerd pipes the answer's body natively, no JS touches
//   a chunk (the JS floor).
// - `POST /relay/<path>`: the same, but JS reads every chunk of the answer and writes it on to the
//   client (through workerd's native `IdentityTransformStream`, the cheapest client side measured)
//   and does nothing else with it: the least any Worker pays that looks at each chunk as it passes,
//   which a gateway must to change the bytes it relays (SPEC §7).
// - `POST /tee/<path>`: the answer's body `tee()`d: one branch piped natively to the client, the
//   other read by JS in batches of up to 64 KiB (`readAtLeast`), its byte count appended as an SSE
//   comment after the pipe ends. What inspecting a stream costs when the client's bytes are never
//   changed: the relay's price for its guarantees is the difference between this row and /relay.

const BATCH = 64 * 1024;

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/_echo") return new Response("ok");
    const [, mode, rest] = url.pathname.match(/^\/(relay|tee)(\/.*)$/) || [null, "pipe", url.pathname];
    const body = await request.json();
    body.model = "u";
    const upstream = await fetch(env.UPSTREAM + rest, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    if (mode === "pipe" || !upstream.body) return upstream;
    const { readable, writable } = new IdentityTransformStream();
    const init = { status: upstream.status, headers: upstream.headers };
    if (mode === "relay") {
      const reader = upstream.body.getReader();
      const writer = writable.getWriter();
      (async () => {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          await writer.write(value);
        }
        await writer.close();
      })().catch(() => writer.abort().catch(() => {}));
      return new Response(readable, init);
    }
    const [client, inspected] = upstream.body.tee();
    const counted = (async () => {
      const reader = inspected.getReader({ mode: "byob" });
      let buffer = new ArrayBuffer(BATCH);
      let bytes = 0;
      for (;;) {
        const { value, done } = await reader.readAtLeast(BATCH, new Uint8Array(buffer));
        if (value) {
          bytes += value.byteLength;
          buffer = value.buffer;
        }
        if (done) return bytes;
      }
    })();
    client
      .pipeTo(writable, { preventClose: true })
      .then(async () => {
        const writer = writable.getWriter();
        await writer.write(new TextEncoder().encode(`: ${await counted} bytes inspected\n\n`));
        await writer.close();
      })
      .catch(() => {});
    return new Response(readable, init);
  },
};
