// What a D1 call costs, for the simulation's service times (issue 34, docs/SCALE.md): a ledger
// database with the Worker's schema (its migrations) under workerd through Miniflare, called
// straight from here (Miniflare's D1 binding: no Worker request in between). It separates the
// three costs the simulation charges a database with:
//   - a call: one batch of one trivial statement (`SELECT 1`, the floor);
//   - a statement: batches of 1, 5, 20 and 80 one-row `INSERT`s into `ledger` (its indexes and
//     its unique generation id included), and of 1, 5 and 20 `UPDATE`s of one `accounts` row (a
//     busy account's: every settlement updates it);
//   - a row: one `INSERT … SELECT … FROM json_each(?)` writing 5, 80 and 500 `ledger` rows (a
//     desk's flush writes hundreds).
// For each: the round trip's median and p99 and the workerd process's CPU per call (from /proc,
// over all the calls of the case), each also over the floor; then per statement and per row, the
// slope between the smallest and the largest case.
//
//   node bench/d1.mjs --script DIR/index.js --config wrangler.toml --migrate [--calls N]
//
// Prints a Markdown table. Not part of scripts/test or CI: timings are not assertions.

import { startForCalls, fail, measure } from "./mf.mjs";

const { mf, d1, calls } = await startForCalls(process.argv.slice(2));
const ledger = d1.find((d) => d.binding !== "DB");
if (!ledger) fail("wrangler.toml declares no ledger database (a [[d1_databases]] other than DB)");
const db = await mf.getD1Database(ledger.binding);

const account = `acct-bench-${Date.now()}`;
await db
  .prepare("INSERT INTO accounts (id, name, balance_micros, held_micros, created_at) VALUES (?1, 'bench', ?2, 0, ?3)")
  .bind(account, 1e12, Date.now())
  .run();

// One batch; its round trip in ms.
async function batch(statements) {
  const t = performance.now();
  const results = await db.batch(statements);
  const ms = performance.now() - t;
  if (results.length !== statements.length) fail(`a batch of ${statements.length} answered ${results.length}`);
  return ms;
}

let generation = 0;
const nextGeneration = () => `gen-${account}-${generation++}`;
const insertOne = db.prepare(
  "INSERT INTO ledger (account_id, kind, amount_micros, generation_id, key_id, created_at) VALUES (?1, 'charge', ?2, ?3, 'key-bench', ?4)",
);
const insertMany = db.prepare(
  "INSERT INTO ledger (account_id, kind, amount_micros, generation_id, key_id, created_at) " +
    "SELECT ?1, 'charge', json_extract(value, '$.a'), json_extract(value, '$.g'), 'key-bench', ?2 FROM json_each(?3)",
);
const updateOne = db.prepare("UPDATE accounts SET balance_micros = balance_micros - ?2 WHERE id = ?1");

const rows = [];
const row = (what, n, m) => rows.push({ what, n, ...m });

const floor = await measure(calls, () => batch([db.prepare("SELECT 1")]));
row("`SELECT 1` (the floor: one call)", 1, floor);
row(
  "read one `accounts` row by id",
  1,
  await measure(calls, () => batch([db.prepare("SELECT balance_micros - held_micros FROM accounts WHERE id = ?1").bind(account)])),
);
const statements = [];
for (const n of [1, 5, 20, 80]) {
  const m = await measure(calls, () =>
    batch(Array.from({ length: n }, () => insertOne.bind(account, 1200, nextGeneration(), Date.now()))),
  );
  row("one-row `INSERT` into `ledger`, × statements", n, m);
  statements.push({ n, m });
}
for (const n of [1, 5, 20]) {
  row("`UPDATE` of one `accounts` row, × statements", n, await measure(calls, () => batch(Array.from({ length: n }, () => updateOne.bind(account, 1)))));
}
const many = [];
for (const n of [5, 80, 500]) {
  const m = await measure(calls, () => {
    const items = Array.from({ length: n }, () => ({ g: nextGeneration(), a: 1200 }));
    return batch([insertMany.bind(account, Date.now(), JSON.stringify(items))]);
  });
  row("one `INSERT … FROM json_each`, × rows", n, m);
  many.push({ n, m });
}

await mf.dispose();

const f = (x) => x.toFixed(3);
console.log(`| batch | statements or rows | round trip p50 / p99, ms | over the floor p50, ms | workerd CPU per call, ms | over the floor, ms |`);
console.log(`|---|---|---|---|---|---|`);
for (const r of rows) {
  console.log(`| ${r.what} | ${r.n} | ${f(r.p50)} / ${f(r.p99)} | ${f(r.p50 - floor.p50)} | ${f(r.cpu)} | ${f(r.cpu - floor.cpu)} |`);
}
// The slope between the smallest and the largest case: what one more statement (or row) costs.
const slope = (xs, key) => (xs.at(-1).m[key] - xs[0].m[key]) / (xs.at(-1).n - xs[0].n);
console.log();
console.log(
  `Per call (the floor): ${f(floor.p50)} ms round trip, ${f(floor.cpu)} ms CPU. ` +
    `Per one-row statement: ${f(slope(statements, "p50"))} ms round trip, ${f(slope(statements, "cpu"))} ms CPU. ` +
    `Per row of one statement: ${f(slope(many, "p50"))} ms round trip, ${f(slope(many, "cpu"))} ms CPU.`,
);
