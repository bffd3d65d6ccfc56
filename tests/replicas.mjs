// Runs the built Worker as several replicas — isolates of the same script in one workerd — sharing
// its Durable Objects and its D1 database, as isolates do in production. For the end-to-end tests
// of what must hold across isolates (SPEC §10: a limit is global, not one per isolate; SPEC §22: a
// model's health object sees its shards, not the isolates).
//
//   node tests/replicas.mjs --script build/index.js --config wrangler.toml --port 0 --migrate
//        [--replicas N] [--var NAME=VALUE]... [--persist DIR]
//
// N replicas (2 unless said): replica 0 answers every request; replica i those sent with
// `Host: replica-<i>.test`. The objects run in replica 0. Prints one line when ready:
// `ready <url>`, then serves until SIGTERM/SIGINT.

import { Miniflare } from "miniflare";
import { parseArgs, miniflareOptions, replicaOptions, serveUntilStopped } from "../bench/mf.mjs";

let replicas = 2;
const args = parseArgs(process.argv.slice(2), (a, next) => {
  if (a !== "--replicas") return false;
  replicas = Number(next());
  return Number.isInteger(replicas) && replicas >= 1;
});
const { options, d1 } = miniflareOptions(args);
const mf = new Miniflare(replicaOptions(options, replicas));
await serveUntilStopped(mf, args, d1);
