// Service times of the Durable Object calls on the request path (issue 34), for the simulation's
// assumptions (docs/SCALE.md): the Worker's own objects under workerd through Miniflare, each
// called straight from here (Miniflare's namespace API: no Worker request in between) at the
// sizes a busy deployment gives them:
//   - a model's health object with 1, 4 and 8 routes, every route's 60 one-minute buckets full
//     (64 stream TTFB samples each) and a week of hours: `observe` (64 successes, a shard's
//     forwarding), `snapshot`, `full`;
//   - a health shard: `report` (16 requests' outcomes), `snapshot`;
//   - an upstream account's object: `observe` (one account failure), `snapshot`;
//   - route capacity on a model's capacity object with 0, 1,000 and 20,000 leases held:
//     `acquire` + `release`;
//   - a key's limit object with 0 and 1,000 slots held: `acquire` + `release`;
//   - a ledger's desk (`desk:<ledger>:<n>`): `keep` of one settlement, and of four settlements
//     with four fast holds (its flush to D1 a quarter of a second later runs in the same process:
//     its CPU is in the figure);
//   - a keyring (`keys:<n>`): `read` of a key answered from its copy, and of a key it reads from
//     D1 first (a new hash each call: one indexed lookup finding none).
// For each: the round trip's median and p99 and the workerd process's CPU per call (from
// /proc, over all the calls of the case), each also over the floor — the same measures of an
// account object's `snapshot` with nothing in it, the cost of any call; and the bytes the object
// stores (a health object's whole state, as `full` returns it: written by every `observe`).
//
//   node bench/objects.mjs --script DIR/index.js --config wrangler.toml --migrate [--calls N]
//
// Prints a Markdown table. Not part of scripts/test or CI: timings are not assertions.

import { startForCalls, fail, measure } from "./mf.mjs";

const { mf, calls } = await startForCalls(process.argv.slice(2));

const namespaces = {};
async function stub(binding, name) {
  namespaces[binding] ??= await mf.getDurableObjectNamespace(binding);
  const ns = namespaces[binding];
  return ns.get(ns.idFromName(name));
}

// One call to object `name`; its round trip in ms and its answer.
async function callObject(binding, name, path, body) {
  const s = await stub(binding, name);
  const t = performance.now();
  const r = await s.fetch(`https://object${path}`, {
    method: "POST",
    headers: { "x-switchyard-object": name, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  const ms = performance.now() - t;
  if (r.status !== 200) fail(`${name}${path}: ${r.status} ${text.slice(0, 300)}`);
  return { ms, text };
}

const now = () => Date.now();
const success = (route, at, ttfb) => ({
  route,
  account: `acct-${route}`,
  outcome: "success",
  at_ms: at,
  stream: true,
  ttfb_ms: ttfb,
  output_tokens: 200,
  duration_ms: ttfb + 1500,
  extra_try: false,
  probe: false,
  retry_after_ms: null,
  key: "key-bench",
});
const observe = (observations, requests = []) => ({ call: "observe", scope: "model", config: {}, observations, requests });

// A model's object with `routes` routes and every bucket full; returns its name.
async function fullModel(routes) {
  const name = `model:bench-${routes}-${now()}`;
  const ids = Array.from({ length: routes }, (_, r) => `r${r}`);
  const t = now();
  // A week of hours (one request each), then an hour of minutes, oldest first.
  const hours = Array.from({ length: 8 * 24 }, (_, h) => ({
    at_ms: t - (8 * 24 - h) * 3_600_000,
    answered: true,
    counted: true,
    stream_ttfb_ms: 400,
    provoked_at: [],
  }));
  await callObject("HEALTH", name, "/", observe([], hours));
  for (let m = 59; m >= 0; m--) {
    const at = t - m * 60_000 - 1_000;
    const batch = ids.flatMap((r) => Array.from({ length: 64 }, (_, i) => success(r, at + i, 100 + ((i * 37) % 1900))));
    await callObject("HEALTH", name, "/", observe(batch));
  }
  return { name, ids };
}

const rows = [];
const row = (call, state, m, bytes = "") => rows.push({ call, state, ...m, bytes });

// The floor: an empty account object's snapshot.
const floor = await measure(calls, async () => (await callObject("HEALTH", "account:bench-floor", "/", { call: "snapshot" })).ms);
row("account `snapshot`, empty (the floor)", "—", floor);

for (const routes of [1, 4, 8]) {
  const { name, ids } = await fullModel(routes);
  const state = `${routes} route${routes > 1 ? "s" : ""}, buckets full`;
  const bytes = (await callObject("HEALTH", name, "/", { call: "full" })).text.length;
  row("model `observe` (64 successes)", state, await measure(calls, async () => {
    const at = now();
    const batch = Array.from({ length: 64 }, (_, i) => success(ids[i % ids.length], at, 300));
    return (await callObject("HEALTH", name, "/", observe(batch))).ms;
  }), bytes);
  row("model `snapshot`", state, await measure(calls, async () => (await callObject("HEALTH", name, "/", { call: "snapshot" })).ms));
  row("model `full`", state, await measure(Math.min(calls, 50), async () => (await callObject("HEALTH", name, "/", { call: "full" })).ms));
  if (routes === 4) {
    const shard = `shard:0:${name.slice("model:".length)}`;
    const reports = Array.from({ length: 16 }, (_, i) => ({
      config: {},
      observations: [success(ids[i % ids.length], now(), 300)],
      request: { at_ms: now(), answered: true, counted: true, stream_ttfb_ms: 300, provoked_at: [] },
    }));
    row("shard `report` (16 requests)", state, await measure(calls, async () => (await callObject("HEALTH_SHARDS", shard, "/", { call: "report", reports })).ms));
    row("shard `snapshot`", state, await measure(calls, async () => (await callObject("HEALTH_SHARDS", shard, "/", { call: "snapshot" })).ms));
  }
}

const account = `account:bench-${now()}`;
row("account `observe` (one failure)", "1 breaker", await measure(calls, async () => {
  const o = { ...success("r0", now(), 300), account: account.slice("account:".length), outcome: { failure: "account" }, stream: false };
  const body = { call: "observe", scope: "accounts", config: {}, observations: [o], requests: [] };
  return (await callObject("HEALTH", account, "/", body)).ms;
}));
row("account `snapshot`", "1 breaker", await measure(calls, async () => (await callObject("HEALTH", account, "/", { call: "snapshot" })).ms));

const hour = 3_600_000;
// A ledger's desk: an isolate's batch handed to it (its items kept in storage, an alarm set).
const settlement = (id, account) => ({
  version: 1,
  has_hold: true,
  unwritten: { account, key_id: "key-bench", generation_id: id, amount: 2_000, now: now(), expires_at: now() + hour },
  record: {
    id, account_id: account, ledger: 0, key_id: "key-bench", model: "bench", api: "chat", stream: true,
    outcome: "answered", route: "r0", provider: "bench", usage: null, estimated: false, delivered_output: 200,
    error_code: null, total_cost_micros: 1_000, overrun_micros: 0, created_at_ms: now(), duration_ms: 1_500,
    hold_path: "fast", attempts: [],
  },
});
const hold = (id, account) => ({ account, key_id: "key-bench", generation_id: id, amount: 2_000, now: now(), expires_at: now() + hour });
// Its account, on the home ledger (the ledger's rows name it).
const home = await mf.getD1Database("DB");
await home
  .prepare("INSERT OR IGNORE INTO accounts (id, balance_micros, created_at) VALUES ('acct-bench-desk', 1000000000000, ?1)")
  .bind(now())
  .run();
for (const [label, n] of [["one settlement", 1], ["4 settlements, 4 fast holds", 4]]) {
  const desk = `desk:0:${n}-${now()}`;
  row("desk `keep`", label, await measure(calls, async (i) => {
    const ids = Array.from({ length: n }, (_, j) => `gen-bench-${desk}-${i}-${j}`);
    const body = {
      ledger: 0,
      settlements: ids.map((id) => settlement(id, "acct-bench-desk")),
      holds: n > 1 ? ids.map((id) => hold(`${id}-h`, "acct-bench-desk")) : [],
    };
    return (await callObject("DESKS", desk, "/", body)).ms;
  }));
}

{
  const ring = `keys:bench-${now()}`;
  const hash = "b".repeat(64);
  await callObject("KEYS", ring, "/", { call: "read", hash, ledger: 0 });
  row("keyring `read`", "from its copy", await measure(calls, async () => (await callObject("KEYS", ring, "/", { call: "read", hash, ledger: 0 })).ms));
  row("keyring `read`", "read from D1", await measure(calls, async (i) => {
    const fresh = `${i}`.padStart(64, "c");
    return (await callObject("KEYS", ring, "/", { call: "read", hash: fresh, ledger: 0 })).ms;
  }));
}

for (const held of [0, 1_000, 20_000]) {
  // A model's capacity object (`capacity:<n>:<model>`, a `LimitObject` since session 19).
  const name = `capacity:0:bench-cap-${held}-${now()}`;
  const want = [{ route: "r0", max: 1_000_000 }];
  for (let i = 0; i < held; i++) {
    await callObject("LIMITS", name, "/capacity", { call: "acquire", id: `held-${i}`, wants: want, lease_ms: hour, wait_ms: 0 });
  }
  row("capacity `acquire` + `release`", `${held.toLocaleString("en")} leases`, await measure(calls, async (i) => {
    const id = `bench-${i}`;
    const a = await callObject("LIMITS", name, "/capacity", { call: "acquire", id, wants: want, lease_ms: hour, wait_ms: 0 });
    const r = await callObject("LIMITS", name, "/capacity", { call: "release", route: "r0", id });
    return a.ms + r.ms;
  }));
}

for (const held of [0, 1_000]) {
  const name = `key:bench-${held}-${now()}`;
  const limit = { rpm: 10_000_000, max_concurrent: 1_000_000 };
  for (let i = 0; i < held; i++) {
    await callObject("LIMITS", name, "/", { call: "acquire", id: `held-${i}`, limit, lease_ms: hour, wait_ms: 0 });
  }
  row("key limit `acquire` + `release`", `${held.toLocaleString("en")} slots`, await measure(calls, async (i) => {
    const id = `bench-${i}`;
    const a = await callObject("LIMITS", name, "/", { call: "acquire", id, limit, lease_ms: hour, wait_ms: 0 });
    const r = await callObject("LIMITS", name, "/", { call: "release", id });
    return a.ms + r.ms;
  }));
}

await mf.dispose();

const f = (x) => x.toFixed(2);
console.log(`| call | state | round trip p50 / p99, ms | over the floor p50, ms | workerd CPU per call, ms | over the floor, ms | stored, bytes |`);
console.log(`|---|---|---|---|---|---|---|`);
for (const r of rows) {
  console.log(
    `| ${r.call} | ${r.state} | ${f(r.p50)} / ${f(r.p99)} | ${f(r.p50 - floor.p50)} | ${f(r.cpu)} | ${f(r.cpu - floor.cpu)} | ${r.bytes === "" ? "" : r.bytes.toLocaleString("en")} |`,
  );
}
