// Shared by the bench/*.mjs runners: command-line options, wrangler.toml → Miniflare options
// (refusing bindings it does not wire up), D1 migrations, workerd's pids and CPU time, a measured
// loop, a JSON call, the cold-start catalog and its fresh isolate, an inspector session.

import { readFileSync, readdirSync, existsSync, cpSync, mkdtempSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, resolve, join, basename } from "node:path";
import http from "node:http";
import WebSocket from "ws";
import { Miniflare } from "miniflare";

export function fail(msg) {
  console.error(`bench: ${msg}`);
  process.exit(2);
}

// --script FILE --port N [--config wrangler.toml] [--migrate] [--var NAME=VALUE]...
// [--d1 BINDING=MIGRATIONS_DIR]... [--persist DIR] [--trigger-handlers]; anything else goes to
// `extra(name, next)`, which returns false for an unknown argument.
export function parseArgs(argv, extra = () => false) {
  const args = { vars: {}, port: 0, migrate: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--script") args.script = resolve(next());
    else if (a === "--config") args.config = resolve(next());
    else if (a === "--port") args.port = Number(next());
    else if (a === "--persist") args.persist = resolve(next());
    else if (a === "--migrate") args.migrate = true;
    else if (a === "--trigger-handlers") args.triggerHandlers = true;
    else if (a === "--var") {
      const v = next();
      const eq = v.indexOf("=");
      if (eq < 1) fail(`--var wants NAME=VALUE, got ${v}`);
      args.vars[v.slice(0, eq)] = v.slice(eq + 1);
    } else if (a === "--d1") {
      // A D1 database without a wrangler.toml (the echo worker), with its migrations.
      const v = next();
      const eq = v.indexOf("=");
      if (eq < 1) fail(`--d1 wants BINDING=MIGRATIONS_DIR, got ${v}`);
      (args.d1 ??= []).push({ binding: v.slice(0, eq), dir: resolve(v.slice(eq + 1)) });
      args.migrate = true;
    } else if (!extra(a, next)) fail(`unknown argument ${a}`);
  }
  if (!args.script) fail("--script is required");
  return args;
}

// ---- a small TOML reader: enough for wrangler.toml (tables, arrays of tables, dotted keys,
// strings, numbers, booleans, arrays and inline tables, comments).
export function parseToml(text) {
  const root = {};
  let table = root;
  let i = 0;
  const err = (m) => fail(`wrangler.toml: ${m} (at offset ${i}: ${JSON.stringify(text.slice(i, i + 30))})`);
  const ws = () => {
    for (;;) {
      while (i < text.length && (text[i] === " " || text[i] === "\t")) i++;
      if (text[i] === "#") while (i < text.length && text[i] !== "\n") i++;
      else return;
    }
  };
  const wsnl = () => {
    for (;;) {
      ws();
      if (text[i] === "\n" || text[i] === "\r") i++;
      else return;
    }
  };
  const key = () => {
    ws();
    if (text[i] === '"' || text[i] === "'") return str();
    const m = /^[A-Za-z0-9_-]+/.exec(text.slice(i));
    if (!m) err("expected a key");
    i += m[0].length;
    return m[0];
  };
  const dotted = () => {
    const parts = [key()];
    for (;;) {
      ws();
      if (text[i] !== ".") return parts;
      i++;
      parts.push(key());
    }
  };
  const str = () => {
    const q = text[i];
    if (text.startsWith(q.repeat(3), i)) {
      const end = text.indexOf(q.repeat(3), i + 3);
      if (end < 0) err("unterminated string");
      let s = text.slice(i + 3, end).replace(/^\r?\n/, "");
      i = end + 3;
      return s;
    }
    i++;
    let s = "";
    while (text[i] !== q) {
      if (i >= text.length || text[i] === "\n") err("unterminated string");
      if (q === '"' && text[i] === "\\") {
        const c = text[++i];
        const map = { n: "\n", t: "\t", r: "\r", '"': '"', "\\": "\\" };
        if (c in map) s += map[c];
        else if (c === "u") {
          s += String.fromCharCode(parseInt(text.slice(i + 1, i + 5), 16));
          i += 4;
        } else err("unknown escape");
        i++;
      } else s += text[i++];
    }
    i++;
    return s;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === '"' || c === "'") return str();
    if (c === "[") {
      i++;
      const arr = [];
      for (;;) {
        wsnl();
        if (text[i] === "]") {
          i++;
          return arr;
        }
        arr.push(value());
        wsnl();
        if (text[i] === ",") i++;
        else if (text[i] !== "]") err("expected , or ]");
      }
    }
    if (c === "{") {
      i++;
      const obj = {};
      for (;;) {
        ws();
        if (text[i] === "}") {
          i++;
          return obj;
        }
        const path = dotted();
        ws();
        if (text[i] !== "=") err("expected =");
        i++;
        setPath(obj, path, value());
        ws();
        if (text[i] === ",") i++;
        else if (text[i] !== "}") err("expected , or }");
      }
    }
    const m = /^(true|false|[+-]?[0-9][0-9_]*(\.[0-9_]+)?([eE][+-]?[0-9]+)?)/.exec(text.slice(i));
    if (!m) err("unsupported value");
    i += m[0].length;
    if (m[0] === "true") return true;
    if (m[0] === "false") return false;
    return Number(m[0].replace(/_/g, ""));
  };
  const setPath = (obj, path, v) => {
    let o = obj;
    for (const p of path.slice(0, -1)) o = o[p] ??= {};
    o[path[path.length - 1]] = v;
  };
  while (i < text.length) {
    wsnl();
    if (i >= text.length) break;
    if (text[i] === "[") {
      const isArray = text[i + 1] === "[";
      i += isArray ? 2 : 1;
      const path = dotted();
      ws();
      if (!text.startsWith(isArray ? "]]" : "]", i)) err("expected ]");
      i += isArray ? 2 : 1;
      let o = root;
      for (const p of path.slice(0, -1)) {
        o = o[p] ??= {};
        if (Array.isArray(o)) o = o[o.length - 1];
      }
      const last = path[path.length - 1];
      if (isArray) {
        (o[last] ??= []).push({});
        table = o[last][o[last].length - 1];
      } else table = o[last] ??= {};
      continue;
    }
    const path = dotted();
    ws();
    if (text[i] !== "=") err("expected =");
    i++;
    setPath(table, path, value());
    ws();
    if (i < text.length && text[i] !== "\n" && text[i] !== "\r") err("junk after value");
  }
  return root;
}

// Miniflare options for `args`, and the D1 databases with their migrations dirs.
export function miniflareOptions(args) {
  const options = {
    modules: true,
    scriptPath: args.script,
    modulesRoot: dirname(args.script),
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: "2026-04-01",
    compatibilityFlags: [],
    bindings: {},
    port: args.port,
    host: "127.0.0.1",
  };
  const d1 = [];
  if (args.config) {
    const cfg = parseToml(readFileSync(args.config, "utf8"));
    const configDir = dirname(args.config);
    // Sections that do not change the bindings the Worker sees.
    const harmless = new Set([
      "name", "main", "compatibility_date", "compatibility_flags", "build", "vars", "d1_databases",
      "durable_objects", "migrations", "workers_dev", "preview_urls", "observability", "dev", "logpush",
      "send_metrics", "keep_vars", "minify", "upload_source_maps", "account_id", "route", "routes",
      "placement", "limits", "rules", "no_bundle", "find_additional_modules", "base_dir",
      // Cron triggers add no binding; nothing fires them here (nor in `wrangler dev` without
      // --test-scheduled), which is what a request benchmark wants. With --trigger-handlers a
      // caller fires them: `GET /cdn-cgi/handler/scheduled?cron=…` (scripts/soak).
      "triggers",
    ]);
    const unsupported = Object.keys(cfg).filter((k) => !harmless.has(k));
    if (unsupported.length)
      fail(
        `wrangler.toml declares ${unsupported.map((k) => `[${k}]`).join(", ")}, which this runner does not ` +
          `wire up; teach bench/mf.mjs about it (Miniflare supports most bindings) before benchmarking.`,
      );
    if (cfg.triggers?.crons?.length && !args.triggerHandlers)
      console.error(`bench/miniflare.mjs: note: cron triggers (${cfg.triggers.crons.join(", ")}) are not fired`);
    if (cfg.compatibility_date) options.compatibilityDate = cfg.compatibility_date;
    if (cfg.compatibility_flags) options.compatibilityFlags = cfg.compatibility_flags;
    for (const [k, v] of Object.entries(cfg.vars ?? {})) options.bindings[k] = v;
    if (cfg.d1_databases) {
      options.d1Databases = {};
      for (const db of cfg.d1_databases) {
        if (!db.binding) fail("a [[d1_databases]] entry has no binding");
        options.d1Databases[db.binding] = db.database_id ?? db.database_name ?? db.binding;
        d1.push({ binding: db.binding, dir: resolve(configDir, db.migrations_dir ?? "migrations") });
      }
    }
    const dos = cfg.durable_objects?.bindings ?? [];
    if (dos.length) {
      const sqlite = new Set((cfg.migrations ?? []).flatMap((m) => m.new_sqlite_classes ?? []));
      options.durableObjects = {};
      for (const b of dos) {
        if (b.script_name) fail(`Durable Object ${b.name} lives in another script (${b.script_name}): not supported`);
        options.durableObjects[b.name] = { className: b.class_name, useSQLite: sqlite.has(b.class_name) };
      }
    }
    if (cfg.env) fail("wrangler.toml has [env.*] sections: not supported");
  }
  Object.assign(options.bindings, args.vars);
  for (const extra of args.d1 ?? []) {
    (options.d1Databases ??= {})[extra.binding] = `bench-${extra.binding}`;
    d1.push(extra);
  }
  // Miniflare's own route to the Worker's handlers: `GET /cdn-cgi/handler/scheduled?cron=…` runs
  // its scheduled event (answers 200 when the handler ran to completion).
  if (args.triggerHandlers) options.unsafeTriggerHandlers = true;
  if (args.persist) {
    options.d1Persist = join(args.persist, "d1");
    options.durableObjectsPersist = join(args.persist, "do");
  }
  return { options, d1 };
}

// Options for `n` replicas of the Worker in `options` — isolates of the same script in one
// workerd, sharing its D1 databases and its Durable Objects, as isolates do in production: replica
// 0 (named `name`) runs the objects and answers every request; replica i (`name-i`) those sent
// with `Host: replica-<i>.test`. `first` overrides options of replica 0 alone.
export function replicaOptions(options, n, name = "switchyard", first = {}) {
  const { port, host, d1Persist, durableObjectsPersist, ...worker } = options;
  // The other replicas reach the first one's Durable Object classes: one object per name, shared.
  const sharedObjects = Object.fromEntries(
    Object.entries(worker.durableObjects ?? {}).map(([binding, o]) => [binding, { className: o.className, scriptName: name }]),
  );
  const others = Array.from({ length: n - 1 }, (_, k) => ({
    ...worker,
    name: `${name}-${k + 1}`,
    routes: [`replica-${k + 1}.test/*`],
    durableObjects: sharedObjects,
  }));
  return { port, host, d1Persist, durableObjectsPersist, workers: [{ ...worker, ...first, name }, ...others] };
}

// Serves `mf` until SIGTERM/SIGINT (then disposes of it): waits until it is ready, applies the D1
// migrations when `args.migrate`, and prints `ready <url>` plus `suffix()`.
export async function serveUntilStopped(mf, args, d1, suffix = () => "") {
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    try {
      await mf.dispose();
    } finally {
      process.exit(0);
    }
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  const url = await mf.ready;
  if (args.migrate) await applyMigrations(mf, d1);
  console.log(`ready ${url.origin}${suffix()}`);
}

// Applies every *.sql file of each database's migrations dir, in name order, statement by
// statement (comments stripped, split on `;` at the end of a line).
export async function applyMigrations(mf, d1) {
  for (const { binding, dir } of d1) {
    if (!existsSync(dir)) fail(`migrations dir ${dir} does not exist`);
    const db = await mf.getD1Database(binding);
    const files = readdirSync(dir).filter((f) => f.endsWith(".sql")).sort();
    for (const f of files) {
      const sql = readFileSync(join(dir, f), "utf8")
        .split("\n")
        .map((l) => l.replace(/--.*$/, ""))
        .join("\n");
      for (const stmt of sql.split(/;\s*(?:\n|$)/).map((s) => s.trim()).filter(Boolean)) {
        try {
          await db.prepare(stmt).run();
        } catch (e) {
          fail(`${f}: ${e.message}\n${stmt}`);
        }
      }
    }
  }
}

// The workerd processes' CPU time so far, ms (utime + stime, clock ticks of 10 ms).
export function cpuMs() {
  let ticks = 0;
  for (const pid of workerdPids()) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // gone meanwhile
    }
  }
  return ticks * 10;
}

export const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

// Runs `one` (which makes one or more calls and returns their summed round trip, ms) `n` times
// after 20 unmeasured ones: the round trip's median and p99, and the workerd processes' CPU per
// run (bench/objects.mjs, bench/d1.mjs).
export async function measure(n, one) {
  for (let i = 0; i < Math.min(20, n); i++) await one(i); // warm
  const times = [];
  const cpu0 = cpuMs();
  for (let i = 0; i < n; i++) times.push(await one(i + 20));
  const cpu = (cpuMs() - cpu0) / n;
  return { p50: quantile(times, 0.5), p99: quantile(times, 0.99), cpu };
}

// The service-time runners' start (bench/objects.mjs, bench/d1.mjs): their command line (the
// common options and `--calls N`, default 200), a Miniflare instance on no port, its D1 migrated
// when `--migrate`. Returns { mf, d1, calls }.
export async function startForCalls(argv) {
  let calls = 200;
  const args = parseArgs(argv, (a, next) => {
    if (a !== "--calls") return false;
    calls = Number(next());
    return Number.isInteger(calls) && calls > 0;
  });
  args.port = 0;
  const { options, d1 } = miniflareOptions(args);
  const mf = new Miniflare(options);
  await mf.ready;
  if (args.migrate) await applyMigrations(mf, d1);
  return { mf, d1, calls };
}

// Our child processes named workerd (for per-request CPU time).
export function workerdPids() {
  const workerd = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const close = stat.lastIndexOf(")");
      const comm = stat.slice(stat.indexOf("(") + 1, close);
      const ppid = Number(stat.slice(close + 2).split(" ")[1]);
      if (ppid === process.pid && comm.startsWith("workerd")) workerd.push(entry);
    } catch {
      // gone meanwhile
    }
  }
  return workerd;
}

// One JSON call to a Worker at `url`; fails the run on a status `ok` refuses (default: ≥ 300).
export async function call(url, method, path, body, headers = {}, ok = (status) => status < 300) {
  const r = await fetch(url + path, {
    method,
    headers: { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!ok(r.status)) fail(`${method} ${path}: ${r.status} ${text}`);
  return text && r.status < 300 ? JSON.parse(text) : null;
}

// The cold-start measurements' setup through the admin API at `url` (admin token `token`): a
// provider on the mock, the model `cold` on it, an account with credit; returns its key.
export async function coldSetup(url, mock, token) {
  const admin = { authorization: `Bearer ${token}` };
  await call(url, "PUT", "/admin/providers/cold", { base_url: `${mock}/cold/ok`, auth: "bearer" }, admin);
  await call(url, "PUT", "/admin/models/cold", {
    context_window: 8192,
    max_output_tokens: 256,
    routes: [{ id: "r0", provider: "cold", upstream_model: "u", apis: ["chat"], verify: false,
               price: { input_per_mtok: 1, output_per_mtok: 2 } }],
  }, admin);
  const account = (await call(url, "POST", "/admin/accounts", {}, admin)).id;
  await call(url, "POST", `/admin/accounts/${account}/credit`, { amount_usd: 100 }, admin);
  return (await call(url, "POST", "/admin/keys", { account_id: account }, admin)).key;
}

// For a fresh isolate meeting a running platform (bench/cold.mjs, bench/cold-profile.mjs): the
// first replica's copy of `script`, its Wasm's bytes made different by a custom section (no change
// in what it does) — V8 shares a module's compiled code among isolates of one process when the
// bytes are the same, which would hand the measured replica the functions the first one compiled.
// Returns the first worker's options (`replicaOptions`'s `first`) and the copy's directory.
export function replicaCopy(script) {
  const dir = mkdtempSync(join(tmpdir(), "cold-replica-"));
  cpSync(dirname(script), dir, { recursive: true });
  const wasm = readdirSync(dir).filter((f) => f.endsWith(".wasm"));
  const name = Buffer.from("cold-bench-replica");
  for (const f of wasm) {
    // Custom section: id 0, size (one LEB128 byte: < 128), name length, name, no payload.
    appendFileSync(join(dir, f), Buffer.concat([Buffer.from([0, name.length + 1, name.length]), name]));
  }
  return { first: { scriptPath: join(dir, basename(script)), modulesRoot: dir }, dir, wasm: wasm.length };
}

// One request to the replica named by `host` (none: the first, through fetch), read to its end:
// its status and text. Node's fetch sets its own Host header, so a named replica is asked through
// node:http, on the connection pool `agent` (one per Miniflare instance: a pooled connection to an
// earlier instance's port would be reset).
export async function sendTo(url, host, agent, method, path, body, headers = {}) {
  const data = body === undefined ? undefined : JSON.stringify(body);
  const h = { "content-type": "application/json", ...headers };
  if (!host) {
    const r = await fetch(url + path, { method, headers: h, body: data });
    return { status: r.status, text: await r.text() };
  }
  return new Promise((ok, err) => {
    const q = http.request(url + path, { method, headers: { ...h, host }, agent }, (r) => {
      const parts = [];
      r.on("data", (c) => parts.push(c));
      r.on("end", () => ok({ status: r.statusCode, text: Buffer.concat(parts).toString() }));
    });
    q.on("error", err);
    q.end(data);
  });
}

// A DevTools protocol session on one of workerd's inspector targets (`/json/list`):
// `send(method, params)` resolves with the reply; `close()`.
export async function inspect(target) {
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((ok, err) => (ws.once("open", ok), ws.once("error", err)));
  let id = 0;
  const pending = new Map();
  ws.on("message", (m) => {
    const msg = JSON.parse(m);
    if (msg.id && pending.has(msg.id)) {
      pending.get(msg.id)(msg);
      pending.delete(msg.id);
    }
  });
  const send = (method, params = {}) =>
    new Promise((ok) => {
      const n = ++id;
      pending.set(n, ok);
      ws.send(JSON.stringify({ id: n, method, params }));
    });
  return { send, close: () => ws.close() };
}
