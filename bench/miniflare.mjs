// Runs a built Worker under workerd through Miniflare's API — the production runtime without
// `wrangler dev`'s dev proxy — for scripts/bench.
//
//   node bench/miniflare.mjs --script build/index.js --port 0 [--config wrangler.toml]
//        [--migrate] [--var NAME=VALUE]... [--d1 BINDING=MIGRATIONS_DIR]... [--persist DIR]
//
// With --config, the bindings come from wrangler.toml: compatibility date and flags, [vars],
// [[d1_databases]] (with --migrate, the migrations_dir's *.sql files are applied in order through
// Miniflare's D1), and Durable Objects of this same script ([[durable_objects.bindings]] without
// script_name; SQLite-backed when listed in a [[migrations]] new_sqlite_classes). Any other binding
// or section that changes what the Worker sees is refused, loudly: a benchmark of a Worker missing a
// binding would measure something else. (The reading lives in bench/mf.mjs.)
//
// Prints one line when ready: `ready <url> workerd=<pid>[,<pid>…]`, then serves until SIGTERM/SIGINT.

import { Miniflare } from "miniflare";
import { parseArgs, miniflareOptions, applyMigrations, workerdPids } from "./mf.mjs";

const args = parseArgs(process.argv.slice(2));
const { options, d1 } = miniflareOptions(args);
const mf = new Miniflare(options);
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
console.log(`ready ${url.origin} workerd=${workerdPids().join(",")}`);
