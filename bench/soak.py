#!/usr/bin/env python3
"""Reads what a soak (scripts/soak) left on disk and checks it against docs/SCALE.md.

    python3 bench/soak.py --persist DIR --load LOAD.json          the run's section
    python3 bench/soak.py --persist DIR --age AGED.json           the retention phase: ages the ledger's first half
    python3 bench/soak.py --persist DIR --load LOAD.json --retained AGED.json   ... and checks what the cron did

DIR is bench/miniflare.mjs's --persist directory of a stopped run: D1's SQLite file under DIR/d1,
each Durable Object's under DIR/do/<-Class>/. LOAD.json is what `switchyard-bench soak` wrote. Every
size is read from the database itself: SQLite's `dbstat` (pages and payload of each table and
index), `PRAGMA page_count` × `page_size` (the database), row counts. Prints a Markdown section
(tables and the bounds) and exits 1 when a database exceeds its bound, a request's record is not
kept anywhere, a hold is left, a sampled record was not found or a continuation failed.
"""

import argparse
import glob
import json
import os
import re
import sqlite3
import sys

# The per-request figures of docs/SCALE.md ("D1: bytes per request (measured)" and "Records
# objects"), measured by `scripts/soak 2000`: keep them in step with that page.
#
# D1 page bytes per settled request that booked a charge (its ledger row and the entries of the
# ledger's three indexes), and per settlement that booked none (its `settled` mark and its index).
D1_PER_CHARGE = 322
D1_PER_MARK = 243
# What a request adds to nothing else in D1; the rest is fixed: the schema, the catalog, the
# account and its key (a migrated database with them and no request).
D1_FIXED = 102_400
# Bytes of a records object per record (the `records` row: the record as JSON, attempts inline,
# and its primary key's index), and of a pin object per pin (row and two indexes).
RECORD_BYTES = 1_394
PIN_BYTES = 224
# An object's own pages: SQLite's schema, the two tables and the index every object creates, the
# runtime's `_cf_KV` (the object's name) and `_cf_METADATA` (its alarm).
OBJECT_BYTES = 32_768
# How far a run may exceed the per-request part of a bound (B-tree fill varies with volume and
# with the order rows arrive in).
TOLERANCE = 0.10


def sqlite_files(pattern):
    return sorted(f for f in glob.glob(pattern) if os.path.basename(f) != "metadata.sqlite")


def on_disk(path):
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def open_db(path):
    """The database with its write-ahead log folded in (the runtime was stopped, not closed)."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


def pragma(db, name):
    return db.execute(f"PRAGMA {name}").fetchone()[0]


def tables(db):
    return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


def count(db, table):
    return db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]


def d1_report(path):
    db = open_db(path)
    page_size, page_count, free = pragma(db, "page_size"), pragma(db, "page_count"), pragma(db, "freelist_count")
    owner = {r[0]: r[1] for r in db.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')")}
    kind = {r[0]: r[1] for r in db.execute("SELECT name, type FROM sqlite_master")}
    stat = db.execute("SELECT name, COUNT(*), SUM(payload), SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    rows = {t: count(db, t) for t in tables(db)}
    charges = db.execute("SELECT COUNT(*) FROM ledger WHERE kind = 'charge'").fetchone()[0] if "ledger" in rows else 0
    objects = []
    for name, pages, payload, size in stat:
        table = owner.get(name, name)
        objects.append({
            "name": name, "table": table, "index": kind.get(name) == "index" or name.startswith("sqlite_autoindex"),
            "pages": pages, "payload": payload or 0, "bytes": size, "rows": rows.get(name),
        })
    db.close()
    return {
        "file": path, "page_size": page_size, "page_count": page_count, "freelist": free,
        "bytes": page_size * page_count, "on_disk": on_disk(path), "objects": objects, "rows": rows,
        "charges": charges,
    }


def object_report(path):
    db = open_db(path)
    names = tables(db)
    records = count(db, "records") if "records" in names else 0
    pins = count(db, "pins") if "pins" in names else 0
    name = None
    if "_cf_KV" in names:
        # The object's own name (`storage.put("name", …)`: a V8-serialized string).
        row = db.execute("SELECT value FROM _cf_KV WHERE key = 'name'").fetchone()
        found = re.search(rb"(records:\d+:\d+|pins:\d+)", bytes(row[0])) if row else None
        name = found.group(1).decode() if found else None
    bytes_ = pragma(db, "page_size") * pragma(db, "page_count")
    db.close()
    return {"name": name, "records": records, "pins": pins, "bytes": bytes_, "on_disk": on_disk(path)}


# The retention phase: the ledger charges and `settled` marks of the run's first half are aged by
# this much in D1's file (the roll-up takes charges older than eight days), as if a week had passed.
AGED_MS = 9 * 86_400_000
HOUR_MS = 3_600_000


def ledger_files(persist):
    """Every D1 database's file (the home one and each ledger: SPEC §22)."""
    return sqlite_files(os.path.join(persist, "d1", "*", "*.sqlite"))


def age(persist, out):
    """Ages the first half of each ledger's charges and marks; writes what the roll-up must produce."""
    aged = {"files": {}, "charges": 0, "marks": 0, "totals": []}
    for path in ledger_files(persist):
        db = open_db(path)
        if "ledger" not in tables(db):
            db.close()
            continue
        n = db.execute("SELECT COUNT(*) FROM ledger WHERE kind = 'charge'").fetchone()[0]
        if n == 0:
            db.close()
            continue
        (edge,) = db.execute("SELECT created_at FROM ledger WHERE kind = 'charge' ORDER BY created_at LIMIT 1 OFFSET ?",
                             (n // 2,)).fetchone()
        totals = db.execute(
            "SELECT account_id, COALESCE(key_id, ''), COALESCE(model, ''), ((created_at - ?1) / ?2) * ?2, "
            "SUM(amount_micros), COUNT(*) FROM ledger WHERE kind = 'charge' AND created_at < ?3 GROUP BY 1, 2, 3, 4",
            (AGED_MS, HOUR_MS, edge)).fetchall()
        charges = db.execute("UPDATE ledger SET created_at = created_at - ? WHERE kind = 'charge' AND created_at < ?",
                             (AGED_MS, edge)).rowcount
        marks = db.execute("UPDATE settled SET created_at = created_at - ? WHERE created_at < ?", (AGED_MS, edge)).rowcount
        db.commit()
        db.close()
        aged["files"][os.path.basename(path)] = edge - AGED_MS
        aged["charges"] += charges
        aged["marks"] += marks
        aged["totals"] += totals
    json.dump(aged, open(out, "w"))
    print(aged["charges"])


def retained(persist, aged_path):
    """After the retention run: the aged charges are their hours' totals, exactly; the aged marks
    are gone; each database's live pages are within the bound of the rows left in it."""
    aged = json.load(open(aged_path))
    r = {"aged_charges": aged["charges"], "aged_marks": aged["marks"], "left": 0, "marks_left": 0, "totals": 0,
         "charges": 0, "marks": 0, "file": 0, "free": 0, "live": 0, "bound": 0}
    totals, problems = [], []
    for path in ledger_files(persist):
        db = open_db(path)
        if "ledger" not in tables(db):
            db.close()
            continue
        edge = aged["files"].get(os.path.basename(path), 0)
        left = db.execute("SELECT COUNT(*) FROM ledger WHERE kind = 'charge' AND created_at < ?", (edge,)).fetchone()[0]
        marks_left = db.execute("SELECT COUNT(*) FROM settled WHERE created_at < ?", (edge,)).fetchone()[0]
        totals += db.execute("SELECT account_id, key_id, model, period_start, amount_micros, charges FROM ledger_rollup "
                             "WHERE period = 'hour'").fetchall()
        charges = db.execute("SELECT COUNT(*) FROM ledger WHERE kind = 'charge'").fetchone()[0]
        marks = db.execute("SELECT COUNT(*) FROM settled").fetchone()[0]
        page_size, page_count, free = pragma(db, "page_size"), pragma(db, "page_count"), pragma(db, "freelist_count")
        db.close()
        live = (page_count - free) * page_size
        bound = D1_FIXED + (charges * D1_PER_CHARGE + marks * D1_PER_MARK) * (1 + TOLERANCE)
        if live > bound:
            problems.append(f"{os.path.basename(path)[:12]}…'s live pages are {live:,} bytes after the retention run, "
                            f"over their bound of {bound:,.0f}")
        for k, v in (("left", left), ("marks_left", marks_left), ("charges", charges), ("marks", marks),
                     ("file", page_count * page_size), ("free", free * page_size), ("live", live), ("bound", bound)):
            r[k] += v
    r["totals"] = len(totals)
    if r["left"]:
        problems.append(f"{r['left']:,} aged charges still in the ledgers after the retention run")
    if r["marks_left"]:
        problems.append(f"{r['marks_left']:,} aged settled marks still in D1 after the retention run")
    if sorted(map(tuple, totals)) != sorted(map(tuple, aged["totals"])):
        problems.append(f"the roll-up's hourly totals {totals} are not the aged charges' {aged['totals']}")
    return r, problems


def fmt(n):
    return f"{n:,}" if isinstance(n, int) else n


def retention_section(args, load):
    """The retention phase's part of the section (after `--age`, the restart and the cron runs)."""
    out, problems = [], []
    p = out.append
    retention = load.get("retention")
    r, found = retained(args.persist, args.retained)
    problems += found
    p("")
    p(f"Then the retention job over a week-old half: the Worker stopped, the first half of the run's charges "
      f"({r['aged_charges']:,}) and settled marks ({r['aged_marks']:,}) aged by nine days in the ledgers' files, the "
      f"Worker started again on the same files, the cron ran {retention['cron_runs'] if retention else '?'} times "
      f"({retention['cron_seconds'] if retention else '?'} s; each run rolls up at most 20,000 charges):")
    p("")
    p("| after the retention run | |")
    p("|---|---|")
    p(f"| aged charges left in the ledger | {r['left']:,} (their {r['totals']} hourly totals in `ledger_rollup`, "
      f"{'equal to' if not any('totals' in m for m in found) else 'NOT equal to'} the aged charges' sums) |")
    p(f"| aged settled marks left | {r['marks_left']:,} |")
    p(f"| ledger charges, settled marks | {r['charges']:,}, {r['marks']:,} |")
    p(f"| D1's file (pages kept for reuse: SQLite does not shrink a file) | {r['file']:,} bytes, {r['free']:,} of them free |")
    p(f"| D1's live pages / bound of the rows left | **{r['live']:,}** / {r['bound']:,.0f} bytes: "
      f"**{'within' if r['live'] <= r['bound'] else 'OVER'}** |")
    if retention:
        p(f"| balances, spend and running totals | {'unchanged' if retention['balances_unchanged'] else 'MOVED'} |")
        p(f"| records found again (after the restart) | {retention['found']} of {retention['lookups']} |")
    return out, problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--persist", required=True)
    ap.add_argument("--load")
    ap.add_argument("--age", metavar="OUT.json", help="age the first half of the ledger; write what the roll-up owes")
    ap.add_argument("--retained", metavar="AGED.json", help="after the retention run: check it and add its table")
    args = ap.parse_args()
    if args.age:
        age(args.persist, args.age)
        return 0
    if args.retained:
        out, problems = retention_section(args, json.load(open(args.load)))
        if problems:
            out += ["", "**FAILED**: " + "; ".join(problems)]
        print("\n".join(out))
        for m in problems:
            print(f"soak.py: {m}", file=sys.stderr)
        return 1 if problems else 0
    load = json.load(open(args.load))
    problems = []

    d1_files = ledger_files(args.persist)
    if not d1_files:
        print(f"soak.py: no D1 database under {args.persist}/d1", file=sys.stderr)
        return 1
    d1 = [d1_report(f) for f in d1_files]

    # What the run asked for: every request leaves one record; one answered 200 a charge, one the
    # failing route answered a settlement that booked nothing.
    # (The extra requests: the load's first probe of each kind and the continuations at its end.)
    requests = load["requests"] + load["extra_requests"]
    charged = load["answered_200"] + load["extra_answered_200"]
    free = load["answered_5xx"] + load["extra_answered_5xx"]
    responses = load["kinds"]["responses"]["as_expected"] + load["extra_responses_200"]

    out = []
    p = out.append
    mix = ", ".join(f"{v['requests']:,} {k.replace('_', ' ')}" for k, v in load["kinds"].items())
    p(f"**{load['requests']:,} requests** ({mix}) in {load['seconds']} s — **{load['requests_per_s']:,.0f} req/s** — "
      f"on {load['concurrency']} connections, through the release Worker under workerd (Miniflare), its D1 and "
      f"Durable Objects as SQLite files on disk; {load['answered_200']:,} answered 200, {load['answered_5xx']:,} 5xx "
      f"(the failing route), {load['unexpected']} otherwise. The cron ran {load['cron']['runs']} times "
      f"({load['cron']['failed']} failed), the last after the load; nothing was held {load['settle_wait_s']} s after "
      f"the last request. {load['extra_requests']} extra requests: a probe of each kind before the load, the "
      f"continuations after it.")
    p("")

    for db in d1:
        total_rows = db["rows"]
        p(f"D1 (`{os.path.basename(db['file'])[:12]}…`), read from the file after the run: "
          f"{db['page_count']:,} pages of {db['page_size']:,} bytes ({db['freelist']:,} free).")
        p("")
        p("| table or index | rows | pages | bytes | payload bytes | bytes per request |")
        p("|---|---|---|---|---|---|")
        shown = sorted(db["objects"], key=lambda o: (-o["bytes"], o["name"]))
        other = {"pages": 0, "bytes": 0, "payload": 0, "n": 0}
        for o in shown:
            if o["pages"] <= 1 and not (o["rows"] or 0) and not o["name"].startswith(("holds", "generations", "settled", "ledger")):
                other["pages"] += o["pages"]; other["bytes"] += o["bytes"]; other["payload"] += o["payload"]; other["n"] += 1
                continue
            label = f"`{o['name']}`" + (f" (index of `{o['table']}`)" if o["index"] else "")
            p(f"| {label} | {fmt(o['rows']) if o['rows'] is not None else '—'} | {o['pages']:,} | {o['bytes']:,} | "
              f"{o['payload']:,} | {o['bytes'] / requests:,.1f} |")
        if other["n"]:
            p(f"| {other['n']} other tables and indexes (one page or none each, no rows) | 0 | {other['pages']:,} | "
              f"{other['bytes']:,} | {other['payload']:,} | — |")
        p(f"| **the database** (`page_count` × `page_size`) | {sum(total_rows.values()):,} | {db['page_count']:,} | "
          f"**{db['bytes']:,}** | | **{db['bytes'] / requests:,.1f}** |")
        p("")
        holds, generations = total_rows.get("holds", 0), total_rows.get("generations", 0)
        if holds:
            problems.append(f"D1 keeps {holds} hold rows after every settlement")
        # This database's share of the run (a ledger keeps its accounts' charges and marks only).
        db_charged = db.get("charges", 0)
        db_free = total_rows.get("settled", 0)
        per_request = db_charged * D1_PER_CHARGE + db_free * D1_PER_MARK
        bound = D1_FIXED + per_request * (1 + TOLERANCE)
        ok = db["bytes"] <= bound
        p(f"Bound (SCALE.md): {D1_FIXED:,} fixed + ({db_charged:,} charges × {D1_PER_CHARGE} + {db_free:,} free settlements × "
          f"{D1_PER_MARK}) × {1 + TOLERANCE:.2f} = **{bound:,.0f} bytes**; measured {db['bytes']:,} "
          f"({db['bytes'] / bound if bound else float('inf'):.0%} of it): **{'within' if ok else 'OVER'}**. Rows: {holds} holds, {generations} "
          f"generations, {total_rows.get('ledger', 0):,} ledger, {total_rows.get('settled', 0):,} settled marks, "
          f"{total_rows.get('ledger_rollup', 0):,} roll-up totals.")
        p("")
        if not ok:
            problems.append(f"D1 is {db['bytes']:,} bytes, over its bound of {bound:,.0f}")
    # Every settlement is in exactly one ledger: the charges and marks of all of them are the run's.
    in_ledgers = (sum(db.get("charges", 0) for db in d1), sum(db["rows"].get("settled", 0) for db in d1))
    if in_ledgers != (charged, free):
        problems.append(f"the ledgers hold {in_ledgers[0]:,} charges and {in_ledgers[1]:,} settled marks; "
                        f"the run settled {charged:,} charged and {free:,} free requests")

    # The Durable Objects: the records class in detail, the others in one line each.
    do_root = os.path.join(args.persist, "do")
    classes = sorted(d for d in os.listdir(do_root) if os.path.isdir(os.path.join(do_root, d))) if os.path.isdir(do_root) else []
    shards = [object_report(f) for f in sqlite_files(os.path.join(do_root, "-RecordShard", "*.sqlite"))]
    day = [s for s in shards if (s["name"] or "").startswith("records:")]
    pin = [s for s in shards if (s["name"] or "").startswith("pins:")]
    rest = [s for s in shards if s not in day and s not in pin]
    p("Records objects (`RECORDS`, one SQLite file each), read from their files:")
    p("")
    p("| objects | how many | rows | bytes (`page_count` × `page_size`) | bytes on disk | bytes per row |")
    p("|---|---|---|---|---|---|")
    for label, group, key in (("a day's records (`records:<day>:<shard>`)", day, "records"),
                              ("response pins (`pins:<n>`)", pin, "pins"),
                              ("never written (a lookup's object)", rest, None)):
        rows = sum(s[key] for s in group) if key else 0
        b = sum(s["bytes"] for s in group)
        p(f"| {label} | {len(group):,} | {rows:,} | {b:,} | {sum(s['on_disk'] for s in group):,} | "
          f"{(f'{b / rows:,.1f}' if rows else '—')} |")
    p("")
    kept = sum(s["records"] for s in day)
    in_d1 = sum(db["rows"].get("generations", 0) for db in d1)
    pins = sum(s["pins"] for s in pin)
    names = sorted(s["name"] for s in day)
    # One isolate mints its ids in one shard an hour: at most one object per hour the run touched
    # (a run of under an hour may straddle one hour's end).
    hours = int(load["seconds"] // 3600) + 2
    p(f"Day objects: {', '.join(f'`{n}`' for n in names[:4])}{' …' if len(names) > 4 else ''} — one isolate mints "
      f"its ids in one shard an hour, so one object per hour the run touched (at most {hours} here).")
    if kept + in_d1 != requests:
        problems.append(f"{requests:,} requests, but {kept:,} records in objects and {in_d1:,} in D1")
    if len(names) > hours:
        problems.append(f"one isolate's records went to {len(names)} day objects in a run of at most {hours} hours")
    records_bound = (kept * RECORD_BYTES + pins * PIN_BYTES) * (1 + TOLERANCE) + len(shards) * OBJECT_BYTES
    records_bytes = sum(s["bytes"] for s in shards)
    ok = records_bytes <= records_bound
    p(f"Bound (SCALE.md): ({kept:,} records × {RECORD_BYTES} + {pins:,} pins × {PIN_BYTES}) × {1 + TOLERANCE:.2f} + "
      f"{len(shards):,} objects × {OBJECT_BYTES:,} = **{records_bound:,.0f} bytes**; measured {records_bytes:,} "
      f"({records_bytes / records_bound if records_bound else float('inf'):.0%} of it): **{'within' if ok else 'OVER'}**. "
      f"{kept:,} of {requests:,} records in objects, {in_d1:,} in D1; {pins:,} pins for {responses:,} Responses answers.")
    p("")
    if not ok:
        problems.append(f"the records objects are {records_bytes:,} bytes, over their bound of {records_bound:,.0f}")
    others = []
    for c in classes:
        if c == "-RecordShard":
            continue
        files = sqlite_files(os.path.join(do_root, c, "*.sqlite"))
        others.append(f"{c.lstrip('-')} {len(files)} ({sum(object_report(f)['bytes'] for f in files):,} bytes)")
    if others:
        p("Other objects: " + "; ".join(others) + ".")
        p("")

    windows = load["samples"]
    p("`GET /v1/generation` from each age window of the run: " + "; ".join(
        f"{k} (from request {v['from_request']:,}) {v['found']} of {v['asked']} found" for k, v in windows.items())
      + ". Responses continued (`previous_response_id`, their pins): " + "; ".join(
        f"{c['window']} {c['ok']} of {c['asked']}" for c in load["continuations"]) + ".")
    asked = sum(v["asked"] for v in windows.values())
    if asked < 30:
        problems.append(f"only {asked} records sampled")
    problems += [f"record not found: {m}" for m in load["missing"]]
    problems += [f"continuation failed: {m}" for m in load["continuation_failures"]]

    if problems:
        p("")
        p("**FAILED**: " + "; ".join(problems))
    print("\n".join(out))
    for m in problems:
        print(f"soak.py: {m}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
