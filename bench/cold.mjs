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
// Prints one Markdown table row: | label | first request p50 / max | second request p50 / max |,
// with `--split`: | label | 404 first | chat request after it | chat request again |.

import { Miniflare } from "miniflare";
import { parseArgs, miniflareOptions, applyMigrations, fail, call, coldSetup } from "./mf.mjs";

let mock;
let kind;
let instances = 5;
let label = "worker";
let split = false;
const args = parseArgs(process.argv.slice(2), (a, next) => {
  if (a === "--mock") mock = next().replace(/\/$/, "");
  else if (a === "--kind") kind = next();
  else if (a === "--instances") instances = Number(next());
  else if (a === "--label") label = next();
  else if (a === "--split") split = true;
  else return false;
  return true;
});
if (!mock || !["switchyard", "echo"].includes(kind)) fail("--mock and --kind switchyard|echo are required");
if (kind === "switchyard" && !args.persist) fail("--kind switchyard needs --persist");
args.port = 0;
const token = "cold-admin-token";
if (kind === "switchyard") args.vars.ADMIN_TOKEN = token;
const { options, d1 } = miniflareOptions(args);

// The setup instance: migrations, a provider on the mock, a model, a funded key.
let request;
if (kind === "switchyard") {
  const mf = new Miniflare(options);
  const url = (await mf.ready).origin;
  if (args.migrate) await applyMigrations(mf, d1);
  const key = await coldSetup(url, mock, token);
  await mf.dispose();
  request = (url) =>
    call(url, "POST", "/v1/chat/completions", { model: "cold", messages: [{ role: "user", content: "hi" }] },
         { authorization: `Bearer ${key}` });
} else {
  request = (url) =>
    call(url, "POST", "/cold/ok/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
}

const bare = [];
const first = [];
const second = [];
for (let i = 0; i < instances; i++) {
  const mf = new Miniflare(options);
  const url = (await mf.ready).origin;
  if (kind === "echo" && args.migrate) await applyMigrations(mf, d1);
  let t = performance.now();
  if (split) {
    const r = await fetch(url + "/cold-start-unknown-path");
    await r.text();
    if (r.status !== 404) fail(`the unknown path answered ${r.status}`);
    bare.push(performance.now() - t);
    t = performance.now();
  }
  await request(url);
  first.push(performance.now() - t);
  t = performance.now();
  await request(url);
  second.push(performance.now() - t);
  await mf.dispose();
}
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const ms = (v) => `${median(v).toFixed(1)} / ${Math.max(...v).toFixed(1)} ms`;
console.log(`| ${label} | ${split ? `${ms(bare)} | ` : ""}${ms(first)} | ${ms(second)} |`);
process.exit(0);
