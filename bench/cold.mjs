// Cold start for scripts/bench (issue 15): the first request a fresh isolate serves — a new
// Miniflare instance each time — against the second, for one Worker; the median and the worst of
// `--instances` instances. The request is a non-stream chat completion through the Worker to the
// mock upstream. With `--split`, each instance first answers a request for an unknown path (a 404
// that reads no storage) and then the chat completion: what starting the isolate and its Wasm
// costs, apart from what the first real request adds (its first storage reads, and compiling the
// code it runs for the first time).
//
//   node bench/cold.mjs --script DIR/index.js --mock URL --kind switchyard|echo
//        [--config wrangler.toml] [--migrate] [--var NAME=VALUE]... [--d1 BINDING=DIR]...
//        [--persist DIR] [--instances N] [--label TEXT] [--split]
//
// `switchyard` needs a catalog and a key: the first instance (not measured) is set up through the
// admin API with `--persist`, and every measured instance reopens that state. `echo` (the worker-rs
// proxy and the JS floor) forwards `/<label>/ok/chat/completions` to the mock.
//
// With `--fresh-isolate`, each instance runs two replicas of the Worker sharing D1 and the objects
// (`mf.mjs replicaOptions`); the first answers two requests (workerd's entry, D1, the model's
// health object and the mock's connection are started), then the second — a fresh isolate meeting
// a running platform, as a new isolate does in production — is measured. The first runs a copy of
// the script whose Wasm has a custom section added (no change in what it does): V8 shares a
// module's compiled code among isolates of one process when the bytes are the same, which would
// hand the second replica the functions the first one compiled. `--share-code` leaves the bytes
// equal: a new isolate in a process where the same Wasm has already been compiled.
//
// Prints one Markdown table row: | label | first request p50 / max | second request p50 / max |,
// with `--split`: | label | 404 first | chat request after it | chat request again |.

import { Miniflare } from "miniflare";
import http from "node:http";
import { rmSync } from "node:fs";
import { parseArgs, miniflareOptions, replicaOptions, applyMigrations, fail, coldSetup, replicaCopy, sendTo } from "./mf.mjs";

let mock;
let kind;
let instances = 5;
let label = "worker";
let split = false;
let freshIsolate = false;
let shareCode = false;
const args = parseArgs(process.argv.slice(2), (a, next) => {
  if (a === "--mock") mock = next().replace(/\/$/, "");
  else if (a === "--kind") kind = next();
  else if (a === "--instances") instances = Number(next());
  else if (a === "--label") label = next();
  else if (a === "--split") split = true;
  else if (a === "--fresh-isolate") freshIsolate = true;
  else if (a === "--share-code") shareCode = true;
  else return false;
  return true;
});
if (!mock || !["switchyard", "echo"].includes(kind)) fail("--mock and --kind switchyard|echo are required");
if (kind === "switchyard" && !args.persist) fail("--kind switchyard needs --persist");
args.port = 0;
const token = "cold-admin-token";
if (kind === "switchyard") args.vars.ADMIN_TOKEN = token;
const { options, d1 } = miniflareOptions(args);

let agent;
const send = (url, host, method, path, body, headers) => sendTo(url, host, agent, method, path, body, headers);

// The setup instance: migrations, a provider on the mock, a model, a funded key.
let request;
if (kind === "switchyard") {
  const mf = new Miniflare(options);
  const url = (await mf.ready).origin;
  if (args.migrate) await applyMigrations(mf, d1);
  const key = await coldSetup(url, mock, token);
  await mf.dispose();
  request = async (url, host) => {
    const r = await send(url, host, "POST", "/v1/chat/completions",
                         { model: "cold", messages: [{ role: "user", content: "hi" }] },
                         { authorization: `Bearer ${key}` });
    if (r.status !== 200) fail(`the chat completion answered ${r.status} ${r.text}`);
  };
} else {
  request = async (url, host) => {
    const r = await send(url, host, "POST", "/cold/ok/chat/completions",
                         { model: "m", messages: [{ role: "user", content: "hi" }] });
    if (r.status !== 200) fail(`the echo answered ${r.status} ${r.text}`);
  };
}

// The first replica's copy of the script (`replicaCopy`).
let firstReplica = {};
let copyDir;
if (freshIsolate && !shareCode) {
  const copy = replicaCopy(args.script);
  if (copy.wasm === 0 && kind === "switchyard") fail(`no .wasm beside ${args.script}`);
  ({ first: firstReplica, dir: copyDir } = copy);
}

const bare = [];
const first = [];
const second = [];
for (let i = 0; i < instances; i++) {
  const mf = new Miniflare(freshIsolate ? replicaOptions(options, 2, "switchyard", firstReplica) : options);
  const url = (await mf.ready).origin;
  agent = new http.Agent({ keepAlive: true });
  if (kind === "echo" && args.migrate) await applyMigrations(mf, d1);
  let host;
  if (freshIsolate) {
    await request(url);
    await request(url);
    host = "replica-1.test";
  }
  let t = performance.now();
  if (split) {
    const r = await send(url, host, "GET", "/cold-start-unknown-path");
    if (r.status !== 404) fail(`the unknown path answered ${r.status}`);
    bare.push(performance.now() - t);
    t = performance.now();
  }
  await request(url, host);
  first.push(performance.now() - t);
  t = performance.now();
  await request(url, host);
  second.push(performance.now() - t);
  await mf.dispose();
}
if (copyDir) rmSync(copyDir, { recursive: true, force: true });
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const ms = (v) => `${median(v).toFixed(1)} / ${Math.max(...v).toFixed(1)} ms`;
console.log(`| ${label} | ${split ? `${ms(bare)} | ` : ""}${ms(first)} | ${ms(second)} |`);
process.exit(0);
