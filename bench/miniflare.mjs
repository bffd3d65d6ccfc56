// Runs a built Worker under workerd through Miniflare's API — the production runtime without
// `wrangler dev`'s dev proxy — for scripts/bench and scripts/soak.
//
//   node bench/miniflare.mjs --script build/index.js --port 0 [--config wrangler.toml]
//        [--migrate] [--var NAME=VALUE]... [--d1 BINDING=MIGRATIONS_DIR]... [--persist DIR]
//        [--trigger-handlers]
//
// With --config, the bindings come from wrangler.toml: compatibility date and flags, [vars],
// [[d1_databases]] (with --migrate, the migrations_dir's *.sql files are applied in order through
// Miniflare's D1), and Durable Objects of this same script ([[durable_objects.bindings]] without
// script_name; SQLite-backed when listed in a [[migrations]] new_sqlite_classes). Any other binding
// or section that changes what the Worker sees is refused, loudly: a benchmark of a Worker missing a
// binding would measure something else. (The reading lives in bench/mf.mjs.) With --persist, D1 and
// the Durable Objects keep their SQLite files under DIR/d1 and DIR/do; with --trigger-handlers,
// `GET /cdn-cgi/handler/scheduled?cron=…` runs the Worker's scheduled event (the cron).
//
// Prints one line when ready: `ready <url> workerd=<pid>[,<pid>…]`, then serves until SIGTERM/SIGINT.

import { Miniflare } from "miniflare";
import { parseArgs, miniflareOptions, serveUntilStopped, workerdPids } from "./mf.mjs";

const args = parseArgs(process.argv.slice(2));
const { options, d1 } = miniflareOptions(args);
await serveUntilStopped(new Miniflare(options), args, d1, () => ` workerd=${workerdPids().join(",")}`);
