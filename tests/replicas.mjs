// Runs the built Worker as two replicas — two isolates of the same script in one workerd — sharing
// its Durable Objects and its D1 database, as isolates do in production. For the end-to-end tests
// of what must hold across isolates (SPEC §10: a limit is global, not one per isolate).
//
//   node tests/replicas.mjs --script build/index.js --config wrangler.toml --port 0 --migrate
//        [--var NAME=VALUE]... [--persist DIR]
//
// Replica 0 answers every request; replica 1 those sent with `Host: replica-1.test`. Prints one line
// when ready: `ready <url>`, then serves until SIGTERM/SIGINT.

import { Miniflare } from "miniflare";
import { parseArgs, miniflareOptions, serveUntilStopped } from "../bench/mf.mjs";

const args = parseArgs(process.argv.slice(2));
const { options, d1 } = miniflareOptions(args);
const { port, host, d1Persist, durableObjectsPersist, ...worker } = options;
const name = "switchyard";
// The second replica reaches the first one's Durable Object classes: one object per name, shared.
const sharedObjects = Object.fromEntries(
  Object.entries(worker.durableObjects ?? {}).map(([binding, o]) => [binding, { className: o.className, scriptName: name }]),
);
const mf = new Miniflare({
  port,
  host,
  d1Persist,
  durableObjectsPersist,
  workers: [
    { ...worker, name },
    { ...worker, name: `${name}-1`, routes: ["replica-1.test/*"], durableObjects: sharedObjects },
  ],
});
await serveUntilStopped(mf, args, d1);
