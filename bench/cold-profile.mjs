// Where a cold isolate's first request goes (issue 36): a V8 CPU profile of the Worker's isolate
// (with its Durable Objects) from before its first request until just after it, and a timeline of
// it — per slice of `--slice` ms, how busy the isolate was and the Rust functions it was in.
// workerd's clock stands still during CPU work, so the Worker cannot time this itself.
//
//   node bench/cold-profile.mjs --script DIR/index.js --config wrangler.toml --mock URL
//        --persist DIR [--first404] [--fresh-isolate [--share-code]] [--slice MS] [--out FILE]
//
// A first Miniflare instance sets up a model on the mock, an account and a key in `--persist`;
// a second, fresh one (a new isolate on the same state) is profiled while it answers one chat
// completion (after a 404 with `--first404`: the isolate and its Wasm started apart from the
// request). With `--fresh-isolate` (as bench/cold.mjs's): two replicas sharing D1 and the objects,
// the first (a copy whose compiled code V8 cannot share) answers two requests, and the second — a
// new isolate meeting a running platform — is profiled alone (its own work, not the objects');
// `--share-code` leaves the first replica's Wasm as it is, so the second finds its code compiled.
// The profiler slows everything down: read the shares and the order, not the times.

import { writeFileSync, rmSync } from "node:fs";
import http from "node:http";
import { Miniflare } from "miniflare";
import { parseArgs, miniflareOptions, replicaOptions, applyMigrations, fail, coldSetup, inspect, replicaCopy, sendTo } from "./mf.mjs";

let mock;
let out;
let first404 = false;
let freshIsolate = false;
let shareCode = false;
let slice = 4;
const args = parseArgs(process.argv.slice(2), (a, next) => {
  if (a === "--mock") mock = next().replace(/\/$/, "");
  else if (a === "--out") out = next();
  else if (a === "--first404") first404 = true;
  else if (a === "--fresh-isolate") freshIsolate = true;
  else if (a === "--share-code") shareCode = true;
  else if (a === "--slice") slice = Number(next());
  else return false;
  return true;
});
if (!mock || !args.persist) fail("--mock and --persist are required");
const token = "cold-profile-admin-token";
args.vars.ADMIN_TOKEN = token;
args.migrate = true;
const { options, d1 } = miniflareOptions(args);

// The setup instance.
let mf = new Miniflare(options);
let url = (await mf.ready).origin;
await applyMigrations(mf, d1);
const key = await coldSetup(url, mock, token);
await mf.dispose();

// The profiled instance (and its measured replica).
const copy = freshIsolate && !shareCode ? replicaCopy(args.script) : null;
const replicas = freshIsolate ? replicaOptions(options, 2, "switchyard", copy?.first) : options;
mf = new Miniflare({ ...replicas, inspectorPort: 0 });
url = (await mf.ready).origin;
const agent = new http.Agent({ keepAlive: true });
let host;
const call = async (method, path, body, headers, ok) => {
  const r = await sendTo(url, host, agent, method, path, body, headers);
  if (!ok(r.status)) fail(`${method} ${path}: ${r.status} ${r.text}`);
};
const chat = () => call("POST", "/v1/chat/completions", { model: "cold", messages: [{ role: "user", content: "hi" }] },
                        { authorization: `Bearer ${key}` }, (status) => status === 200);
if (freshIsolate) {
  await chat();
  await chat();
  host = "replica-1.test";
}
const inspector = await mf.getInspectorURL();
const targets = await (await fetch(`http://${inspector.host}/json/list`)).json();
const id = freshIsolate ? "core:user:switchyard-1" : "core:user:";
const target = targets.find((t) => t.id === id);
if (!target) fail(`no isolate ${id} among ${targets.map((t) => t.id).join(", ")}`);
const { send, close } = await inspect(target);
await send("Profiler.enable");
await send("Profiler.setSamplingInterval", { interval: 100 });
await send("Profiler.start");
const times = [];
let t = performance.now();
if (first404) {
  await call("GET", "/cold-start-unknown-path", undefined, {}, (status) => status === 404);
  times.push(["404", performance.now() - t]);
  t = performance.now();
}
await chat();
times.push(["first chat completion", performance.now() - t]);
await new Promise((r) => setTimeout(r, 300)); // what the request left to do after its answer
const { result } = await send("Profiler.stop");
close();
await mf.dispose();
if (copy) rmSync(copy.dir, { recursive: true, force: true });
if (out) writeFileSync(out, JSON.stringify(result.profile));

// The timeline: per slice, the busy time and the innermost Rust functions of its samples.
const p = result.profile;
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const slices = new Map();
let at = 0;
for (let i = 0; i < p.samples.length; i++) {
  at += p.timeDeltas[i];
  const ms = (p.timeDeltas[i + 1] ?? 0) / 1000;
  let label = byId.get(p.samples[i]).callFrame.functionName || "(anonymous)";
  if (label === "(idle)") continue;
  for (let cur = p.samples[i]; cur !== undefined; cur = parent.get(cur)) {
    const name = byId.get(cur).callFrame.functionName;
    if (/^<?switchyard/.test(name)) {
      label = name;
      break;
    }
  }
  label = label.replace(/::h[0-9a-f]{16}$/, "").replace(/::\{\{closure\}\}/g, "");
  const k = Math.floor(at / 1000 / slice);
  const m = slices.get(k) ?? new Map();
  m.set(label, (m.get(label) ?? 0) + ms);
  slices.set(k, m);
}
console.log(times.map(([what, ms]) => `${what}: ${ms.toFixed(1)} ms (profiled)`).join("; "));
console.log(`\n| from ms | busy ms | where (ms) |\n|---|---|---|`);
for (const [k, m] of [...slices.entries()].sort((a, b) => a[0] - b[0])) {
  const busy = [...m.values()].reduce((a, b) => a + b, 0);
  const top = [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3);
  console.log(`| ${k * slice} | ${busy.toFixed(1)} | ${top.map(([l, ms]) => `\`${l.slice(0, 60)}\` ${ms.toFixed(1)}`).join(", ")} |`);
}
// The whole window, by label: where the busy time went.
const total = new Map();
for (const m of slices.values()) for (const [l, ms] of m) total.set(l, (total.get(l) ?? 0) + ms);
const busy = [...total.values()].reduce((a, b) => a + b, 0);
console.log(`\nbusy ${busy.toFixed(1)} ms in all; the largest:\n\n| where | ms |\n|---|---|`);
for (const [l, ms] of [...total.entries()].sort((a, b) => b[1] - a[1]).slice(0, 20)) {
  console.log(`| \`${l.slice(0, 90)}\` | ${ms.toFixed(1)} |`);
}
process.exit(0);
