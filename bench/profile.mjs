// Where the time of a warm non-stream request goes under workerd (Miniflare): V8 CPU profiles of
// every isolate involved (the Worker with its Durable Objects, Miniflare's D1 and its entry
// worker), taken while N sequential requests run, summarised per isolate and per function.
// workerd runs all of them on one thread, so their busy times add up on the request path.
//
//   node bench/profile.mjs --script DIR/index.js --config wrangler.toml --mock URL
//        [--requests N] [--stream-chunks N] [--out DIR] [--var NAME=VALUE]... [--windows GAP_MS]
//
// --stream-chunks N profiles stream requests whose upstream sends N chunks back to back instead.
// --windows GAP_MS sends the requests GAP_MS apart and counts only the samples taken while a
// request waited for its first byte (its window, timed on the same monotonic clock as V8's
// samples): what the request path itself costs, apart from the background work between requests.
//
// Prints a Markdown summary of the Worker's isolate (also written to DIR/profile.md, with the raw
// .cpuprofile files of every isolate, which Chrome DevTools opens). Run by scripts/bench after the
// measurements; the profiler slows everything down, so read the shares, not the absolute times.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Miniflare } from "miniflare";
import { parseArgs, miniflareOptions, applyMigrations, fail, inspect } from "./mf.mjs";

let mock;
let requests = 2000;
let outDir;
let streamChunks = 0;
let gapMs = null;
let top = 12;
const args = parseArgs(process.argv.slice(2), (a, next) => {
  if (a === "--mock") mock = next().replace(/\/$/, "");
  else if (a === "--requests") requests = Number(next());
  else if (a === "--out") outDir = next();
  else if (a === "--stream-chunks") streamChunks = Number(next());
  else if (a === "--windows") gapMs = Number(next());
  else if (a === "--top") top = Number(next());
  else return false;
  return true;
});
if (!mock) fail("--mock is required");
const token = "profile-admin-token";
args.vars.ADMIN_TOKEN = token;
args.migrate = true;

const { options, d1 } = miniflareOptions(args);
options.inspectorPort = 0;
const mf = new Miniflare(options);
try {
  const base = (await mf.ready).origin;
  await applyMigrations(mf, d1);

  // The catalog: one healthy model on the mock, an account with credit, a key.
  const admin = async (method, path, body, want) => {
    const r = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const text = await r.text();
    if (r.status !== want) fail(`${method} ${path}: ${r.status} ${text}`);
    return JSON.parse(text);
  };
  await admin("PUT", "/admin/providers/p", { base_url: streamChunks ? `${mock}/profile/chunks/${streamChunks}/0` : `${mock}/profile/ok`, auth: "bearer" }, 200);
  await admin(
    "PUT",
    "/admin/models/m",
    {
      context_window: 8192,
      max_output_tokens: 1024,
      routes: [
        { id: "r0", provider: "p", upstream_model: "u", apis: ["chat"], price: { input_per_mtok: 1, output_per_mtok: 2 } },
      ],
    },
    200,
  );
  const account = await admin("POST", "/admin/accounts", {}, 201);
  await admin("POST", `/admin/accounts/${account.id}/credit`, { amount_usd: 1000 }, 200);
  const { key } = await admin("POST", "/admin/keys", { account_id: account.id }, 201);
  const body = JSON.stringify({ model: "m", stream: streamChunks > 0, messages: [{ role: "user", content: "Say hello" }] });
  // Each request's window in µs of CLOCK_MONOTONIC (V8's profile clock): sent → first byte.
  const windows = [];
  const micros = () => Number(process.hrtime.bigint() / 1000n);
  const one = async (timed) => {
    const start = micros();
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body,
    });
    const reader = r.body.getReader();
    await reader.read();
    if (timed) windows.push([start, micros()]);
    while (!(await reader.read()).done);
    if (r.status !== 200) fail(`chat: ${r.status}`);
  };
  for (let i = 0; i < 300; i++) await one();

  // Profile every isolate the request touches.
  const inspector = await mf.getInspectorURL();
  const targets = await (await fetch(`http://${inspector.host}/json/list`)).json();
  const wanted = targets.filter((t) => /^(core:user:|core:entry|d1:db:)/.test(t.id));
  const sessions = [];
  for (const t of wanted) {
    const { send, close } = await inspect(t);
    await send("Profiler.enable");
    await send("Profiler.setSamplingInterval", { interval: 100 });
    sessions.push({ name: t.id, send, close });
  }
  for (const s of sessions) await s.send("Profiler.start");
  const t0 = performance.now();
  for (let i = 0; i < requests; i++) {
    await one(gapMs !== null);
    if (gapMs) await new Promise((ok) => setTimeout(ok, gapMs));
  }
  const wallMs = performance.now() - t0;
  const profiles = [];
  for (const s of sessions) {
    const { result } = await s.send("Profiler.stop");
    profiles.push({ name: s.name, profile: result.profile });
    s.close();
  }

  // Self time per node, then per category and per function, for the Worker's isolate (it holds
  // its Durable Objects too). The other isolates' profiles are only saved: V8 samples each isolate
  // on the one shared thread, so their busy times overlap and do not add up to the wall time.
  const per = (x) => (x / requests).toFixed(3);
  const category = (f) => {
    if (f.url.startsWith("wasm://")) return "Switchyard's Rust code (wasm)";
    if (f.url.endsWith("index.js")) return "wasm-bindgen / worker-rs JS glue (index.js)";
    if (f.url.startsWith("cloudflare-internal:d1")) return "D1 client (cloudflare-internal:d1-api, JS)";
    if (f.functionName === "(garbage collector)") return "garbage collector";
    if (f.functionName === "put" || f.functionName === "get") return `Durable Object storage ${f.functionName} (native)`;
    if (["fetch", "Response", "Request", "Headers"].includes(f.functionName)) return `${f.functionName} (native)`;
    return "other runtime (native, microtasks, program)";
  };
  const labelOf = (f) => {
    const where = f.url.startsWith("wasm://") ? "wasm" : f.url.split("/").pop() || "native";
    return `${f.functionName || "(anonymous)"} [${where}]`;
  };
  let out = "";
  for (const { name, profile } of profiles) {
    if (outDir) {
      mkdirSync(outDir, { recursive: true });
      writeFileSync(join(outDir, `${name.replace(/[^A-Za-z0-9]+/g, "_")}.cpuprofile`), JSON.stringify(profile));
    }
    if (name !== "core:user:") continue;
    const byId = new Map(profile.nodes.map((n) => [n.id, n]));
    const parent = new Map();
    for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    const cats = new Map();
    const fns = new Map();
    const inclusive = new Map();
    let busy = 0;
    let inWindows = 0;
    let at = profile.startTime;
    let w = 0;
    for (let i = 0; i < profile.samples.length; i++) {
      at += profile.timeDeltas[i] ?? 0;
      const f = byId.get(profile.samples[i]).callFrame;
      const ms = (profile.timeDeltas[i + 1] ?? 0) / 1000;
      if (gapMs !== null) {
        while (w < windows.length && windows[w][1] < at) w++;
        if (w >= windows.length || windows[w][0] > at) continue;
        inWindows += ms;
      }
      if (f.functionName === "(idle)") continue;
      busy += ms;
      cats.set(category(f), (cats.get(category(f)) ?? 0) + ms);
      const label = labelOf(f);
      fns.set(label, (fns.get(label) ?? 0) + ms);
      const seen = new Set();
      for (let id = profile.samples[i]; id !== undefined; id = parent.get(id)) {
        const l = labelOf(byId.get(id).callFrame);
        if (!seen.has(l)) seen.add(l), inclusive.set(l, (inclusive.get(l) ?? 0) + ms);
      }
    }
    if (gapMs !== null) {
      const span = windows.reduce((t, [a, b]) => t + (b - a), 0) / 1000;
      out += `Request windows only (sent → first byte, ${gapMs} ms apart): ${per(span)} ms a window on ` +
        `the client's clock, ${per(inWindows)} ms of it in samples, ${per(busy)} ms of that the Worker's isolate busy.\n\n`;
    }
    out += `V8 CPU profile of the Worker's isolate (with its Durable Objects) over ${requests} sequential warm ` +
      `${streamChunks ? `stream requests of ${streamChunks} chunks` : "non-stream requests"}: ${per(busy)} ms sampled per request, ${per(wallMs)} ms wall per request (the ` +
      `profiler slows everything down: read the shares).\n\n`;
    out += "| where | share |\n|---|---|\n";
    for (const [c, ms] of [...cats.entries()].sort((a, b) => b[1] - a[1]))
      out += `| ${c} | ${((ms / busy) * 100).toFixed(1)} % |\n`;
    out += "\nTop functions by self time:\n\n| function | share |\n|---|---|\n";
    for (const [label, ms] of [...fns.entries()].sort((a, b) => b[1] - a[1]).slice(0, top))
      out += `| \`${label.replace(/\|/g, "\\|")}\` | ${((ms / busy) * 100).toFixed(1)} % |\n`;
    if (top > 12) {
      out += "\nTop Rust functions by inclusive time (the function and what it called):\n\n| function | share |\n|---|---|\n";
      for (const [label, ms] of [...inclusive.entries()].filter(([l]) => l.endsWith("[wasm]")).sort((a, b) => b[1] - a[1]).slice(0, top))
        out += `| \`${label.replace(/\|/g, "\\|")}\` | ${((ms / busy) * 100).toFixed(1)} % |\n`;
    }
  }
  console.log(out);
  if (outDir) writeFileSync(join(outDir, "profile.md"), out);
  if (outDir && gapMs !== null) writeFileSync(join(outDir, "windows.json"), JSON.stringify(windows));
} finally {
  await mf.dispose();
}
