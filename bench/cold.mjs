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
// hand the second replica the functions the first one compiled.
//
// Prints one Markdown table row: | label | first request p50 / max | second request p50 / max |,
// with `--split`: | label | 404 first | chat request after it | chat request again |.

import { Miniflare } from "miniflare";
import http from "node:http";
import { cpSync, mkdtempSync, readdirSync, appendFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { parseArgs, miniflareOptions, replicaOptions, applyMigrations, fail, coldSetup } from "./mf.mjs";

let mock;
let kind;
let instances = 5;
let label = "worker";
let split = false;
let freshIsolate = false;
const args = parseArgs(process.argv.slice(2), (a, next) => {
  if (a === "--mock") mock = next().replace(/\/$/, "");
  else if (a === "--kind") kind = next();
  else if (a === "--instances") instances = Number(next());
  else if (a === "--label") label = next();
  else if (a === "--split") split = true;
  else if (a === "--fresh-isolate") freshIsolate = true;
  else return false;
  return true;
});
if (!mock || !["switchyard", "echo"].includes(kind)) fail("--mock and --kind switchyard|echo are required");
if (kind === "switchyard" && !args.persist) fail("--kind switchyard needs --persist");
args.port = 0;
const token = "cold-admin-token";
if (kind === "switchyard") args.vars.ADMIN_TOKEN = token;
const { options, d1 } = miniflareOptions(args);

// One request to the replica named by `host` (none: the first, through fetch as before), read to
// its end: its status and text. Node's fetch sets its own Host header, so a named replica is asked
// through node:http, on a connection pool of each instance's own (`agent`, set per instance: a
// pooled connection to an earlier instance's port would be reset).
let agent;
const send = async (url, host, method, path, body, headers = {}) => {
  const data = body === undefined ? undefined : JSON.stringify(body);
  const h = { "content-type": "application/json", ...headers };
  if (!host) {
    const r = await fetch(url + path, { method, headers: h, body: data });
    return { status: r.status, text: await r.text() };
  }
  return new Promise((resolve, reject) => {
    const q = http.request(url + path, { method, headers: { ...h, host }, agent }, (r) => {
      const parts = [];
      r.on("data", (c) => parts.push(c));
      r.on("end", () => resolve({ status: r.statusCode, text: Buffer.concat(parts).toString() }));
    });
    q.on("error", reject);
    q.end(data);
  });
};

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

// The first replica's copy of the script, with its Wasm's bytes made different (a custom section).
let firstReplica = {};
let copyDir;
if (freshIsolate) {
  const dir = (copyDir = mkdtempSync(join(tmpdir(), "cold-replica-")));
  cpSync(dirname(args.script), dir, { recursive: true });
  const wasm = readdirSync(dir).filter((f) => f.endsWith(".wasm"));
  if (wasm.length === 0 && kind === "switchyard") fail(`no .wasm beside ${args.script}`);
  const name = Buffer.from("cold-bench-replica");
  for (const f of wasm) {
    // Custom section: id 0, size (one LEB128 byte: < 128), name length, name, no payload.
    appendFileSync(join(dir, f), Buffer.concat([Buffer.from([0, name.length + 1, name.length]), name]));
  }
  firstReplica = { scriptPath: join(dir, basename(args.script)), modulesRoot: dir };
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
