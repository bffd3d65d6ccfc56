#!/usr/bin/env python3
"""scripts/bench-keys's two halves around `switchyard-bench keys` (issue 33: 1M keys and 100k
accounts keep lookups and the admin API within their usual time).

  keys.py --fill --persist DIR --run EMPTY.json [--accounts N] [--keys M]
      Writes N accounts and M keys (default 100,000 and 1,000,000) straight into the stopped
      Worker's D1 files under DIR/d1, spread evenly over the ledgers as the Worker would have put
      them: each account in one ledger's file with its keys, and its row in the home database's
      directory. Which file is which ledger is read from the run on empty databases (EMPTY.json:
      the accounts it made, each with its ledger, are found in their files); the home database is
      the one with the catalog. Rows as the admin API writes them: hashed keys, nothing else.
  keys.py --compare EMPTY.json FULL.json FILL.json
      The Markdown table of both runs (FILL.json: what --fill printed), p50 and p99 per call, and the ratio; exits 1 when a call's
      p50 got more than 2× slower and more than 2 ms (a lookup that stopped using its index
      scans 250,000 rows: hundreds of times slower, not a few percent).
"""

import argparse
import glob
import hashlib
import json
import os
import sqlite3
import sys


def d1_files(persist):
    return sorted(f for f in glob.glob(os.path.join(persist, "d1", "*", "*.sqlite"))
                  if os.path.basename(f) != "metadata.sqlite")


def fill(persist, run, accounts, keys):
    made = json.load(open(run))["accounts"]
    ledgers, home = {}, None
    for path in d1_files(persist):
        db = sqlite3.connect(path)
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "accounts" not in names:
            db.close()
            continue
        if "catalog" in names and db.execute("SELECT COUNT(*) FROM catalog").fetchone()[0]:
            home = path
        ids = [r[0] for r in db.execute("SELECT id FROM accounts")]
        found = {made[i] for i in ids if i in made}
        db.close()
        if len(found) == 1:
            ledgers[found.pop()] = path
        elif len(found) > 1:
            sys.exit(f"keys.py: {path} holds accounts of ledgers {found}")
    if home is None or 0 not in ledgers or ledgers[0] != home:
        sys.exit(f"keys.py: no home database with ledger 0's accounts among {d1_files(persist)}")
    order = sorted(ledgers)
    print(f"keys.py: ledgers {order} found; filling {accounts:,} accounts and {keys:,} keys", file=sys.stderr)
    per_account = max(1, keys // accounts)
    directory = []
    for n, ledger in enumerate(order):
        db = sqlite3.connect(ledgers[ledger])
        mine = range(n, accounts, len(order))
        ids = [f"acct-fill-{a:07d}" for a in mine]
        db.executemany("INSERT INTO accounts (id, balance_micros, created_at) VALUES (?, 1000000, 0)",
                       ((i,) for i in ids))
        rows = ((f"key-fill-{a:07d}-{k}", f"acct-fill-{a:07d}",
                 hashlib.sha256(f"fill:{a}:{k}".encode()).hexdigest(), 0)
                for a in mine for k in range(per_account))
        db.executemany("INSERT INTO api_keys (id, account_id, key_hash, created_at) VALUES (?, ?, ?, ?)", rows)
        db.commit()
        db.close()
        directory += [(i, ledger) for i in ids]
    db = sqlite3.connect(home)
    db.executemany("INSERT INTO account_ledgers (account_id, ledger) VALUES (?, ?)", directory)
    db.commit()
    counts = []
    for ledger in order:
        d = sqlite3.connect(ledgers[ledger])
        counts.append((ledger, d.execute("SELECT COUNT(*) FROM accounts").fetchone()[0],
                       d.execute("SELECT COUNT(*) FROM api_keys").fetchone()[0]))
        d.close()
    directory_rows = db.execute("SELECT COUNT(*) FROM account_ledgers").fetchone()[0]
    db.close()
    print(json.dumps({"ledgers": counts, "directory": directory_rows}))


def compare(empty_path, full_path, fill_path):
    empty, full, filled = json.load(open(empty_path)), json.load(open(full_path)), json.load(open(fill_path))
    out, slower = [], []
    p = out.append
    per = ", ".join(f"ledger {l}: {a:,} accounts, {k:,} keys" for l, a, k in filled["ledgers"])
    p(f"Filled: {sum(a for _, a, _ in filled['ledgers']):,} accounts and {sum(k for _, _, k in filled['ledgers']):,} "
      f"keys ({per}; {filled['directory']:,} directory rows in the home database).")
    p("")
    p(f"Each call timed from outside, {empty['samples']} accounts' lives per run, "
      f"through the release Worker under workerd (Miniflare) with its D1 files on disk; the same "
      f"calls on empty databases first, then on the same files filled.")
    p("")
    p("| call | empty: p50 / p99 ms | filled: p50 / p99 ms | p50 filled ÷ empty |")
    p("|---|---|---|---|")
    for op, e in empty["ops"].items():
        f = full["ops"][op]
        ratio = f["p50"] / e["p50"] if e["p50"] else float("inf")
        p(f"| `{op}` | {e['p50']:.2f} / {e['p99']:.2f} | {f['p50']:.2f} / {f['p99']:.2f} | {ratio:.2f} |")
        if ratio > 2 and f["p50"] - e["p50"] > 2:
            slower.append(f"{op}: p50 {e['p50']:.2f} → {f['p50']:.2f} ms")
    if slower:
        out += ["", "**SLOWER**: " + "; ".join(slower)]
    print("\n".join(out))
    return 1 if slower else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fill", action="store_true")
    ap.add_argument("--persist")
    ap.add_argument("--run")
    ap.add_argument("--accounts", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--compare", nargs=3, metavar=("EMPTY", "FULL", "FILL"))
    args = ap.parse_args()
    if args.fill:
        fill(args.persist, args.run, args.accounts, args.keys)
        return 0
    if args.compare:
        return compare(*args.compare)
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
