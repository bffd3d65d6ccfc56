# Shared by scripts/*: tool locations, ports, and starting/stopping the mock and wrangler dev.
# Sourced, not run.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export WRANGLER_SEND_METRICS=false
export CI="${CI:-}"
# worker-build downloads wasm-bindgen, esbuild and wasm-opt from GitHub unless told where they are;
# scripts/setup installs all three from crates.io / npm, so point it at them (works with or
# without GitHub).
export WASM_BINDGEN_BIN="${WASM_BINDGEN_BIN:-$(command -v wasm-bindgen || true)}"
export ESBUILD_BIN="${ESBUILD_BIN:-$ROOT/node_modules/.bin/esbuild}"
export WASM_OPT_BIN="${WASM_OPT_BIN:-$ROOT/node_modules/binaryen/bin/wasm-opt}"
WRANGLER="$ROOT/node_modules/.bin/wrangler"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL SECONDS: until URL answers any HTTP status.
wait_http() {
  local url=$1 deadline=$((SECONDS + $2))
  until curl -s -o /dev/null --max-time 2 "$url"; do
    if [ $SECONDS -ge $deadline ]; then return 1; fi
    sleep 0.3
  done
}

# start_mock PORT LOGFILE: starts the mock upstream (built first); sets MOCK_PID and MOCK_PORT
# (PORT 0 picks a free one).
start_mock() {
  local port=$1 logfile=$2
  cargo build -q -p mock-upstream --release
  "$ROOT/target/release/mock-upstream" --port "$port" >"$logfile" 2>&1 &
  MOCK_PID=$!
  local deadline=$((SECONDS + 30))
  until grep -q "listening on" "$logfile" 2>/dev/null; do
    if ! kill -0 "$MOCK_PID" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      cat "$logfile" >&2; return 1
    fi
    sleep 0.1
  done
  MOCK_PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$logfile" | head -1)
}

# isolated_config DIR: a copy of the built Worker in DIR/build and a wrangler config DIR/wrangler.toml
# that runs it without the build step, so a run is not disturbed by later builds of build/ (a
# developer's scripts/dev, a benchmark). Prints the config's path.
isolated_config() {
  local dir=$1
  rm -rf "$dir/build" && mkdir -p "$dir" && cp -r "$ROOT/build" "$dir/build"
  python3 - "$ROOT/wrangler.toml" "$dir/wrangler.toml" "$ROOT/migrations" <<'PY'
import re, sys
src, dst, migrations = sys.argv[1:]
text = open(src).read()
text = re.sub(r'\n\[build\]\n(?:[^\[\n][^\n]*\n|\n)*', '\n', text)
text = text.replace('migrations_dir = "migrations"', 'migrations_dir = "%s"' % migrations)
open(dst, 'w').write(text)
PY
  echo "$dir/wrangler.toml"
}

# d1_databases CONFIG: the database_name of every [[d1_databases]] in a wrangler config, one a line.
d1_databases() {
  python3 -c 'import sys, tomllib; [print(d["database_name"]) for d in tomllib.load(open(sys.argv[1], "rb")).get("d1_databases", [])]' "$1"
}

# start_wrangler CONFIG PORT PERSIST_DIR LOGFILE [wrangler dev args...]: applies the D1 migrations to
# the local database in PERSIST_DIR, then runs `wrangler dev -c CONFIG` on 127.0.0.1:PORT; sets
# WRANGLER_PID.
start_wrangler() {
  local config=$1 port=$2 persist=$3 logfile=$4; shift 4
  local db
  for db in $(d1_databases "$config"); do
    (cd "$ROOT" && CI=1 "$WRANGLER" d1 migrations apply "$db" -c "$config" --local --persist-to "$persist") >>"$logfile.migrate" 2>&1 \
      || { cat "$logfile.migrate" >&2; return 1; }
  done
  (cd "$ROOT" && exec "$WRANGLER" dev -c "$config" --ip 127.0.0.1 --port "$port" --inspector-port "$(free_port)" \
     --persist-to "$persist" --show-interactive-dev-session=false "$@") >"$logfile" 2>&1 &
  WRANGLER_PID=$!
  if ! wait_http "http://127.0.0.1:$port/v1/models" 180; then
    log "wrangler dev did not start; its log:"; tail -50 "$logfile" >&2; return 1
  fi
}

# start_miniflare LOGFILE ARGS...: runs bench/miniflare.mjs ARGS on a free port; sets MF_PID, MF_URL and
# MF_WORKERD (workerd's pids, comma-separated).
start_miniflare() {
  local logfile=$1; shift
  node "$ROOT/bench/miniflare.mjs" --port 0 "$@" >"$logfile" 2>&1 &
  MF_PID=$!
  local deadline=$((SECONDS + 120))
  until grep -q '^ready ' "$logfile" 2>/dev/null; do
    if ! kill -0 "$MF_PID" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      log "Miniflare did not start; its log ($logfile):"; tail -40 "$logfile" >&2; return 1
    fi
    sleep 0.2
  done
  MF_URL=$(sed -n 's/^ready \([^ ]*\) .*/\1/p' "$logfile" | head -1)
  MF_WORKERD=$(sed -n 's/^ready .* workerd=\(.*\)$/\1/p' "$logfile" | head -1)
}

# run_note SCRIPT: one line saying when, by which script, on what machine and at which commit a
# measurement ran (the header of a generated section).
run_note() {
  local commit
  commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]; then commit="$commit + uncommitted changes"; fi
  echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') by \`$1\` on $(nproc) cores," \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr);" \
    "workerd $(node -p "require('$ROOT/node_modules/workerd/package.json').version" 2>/dev/null)," \
    "miniflare $(node -p "require('$ROOT/node_modules/miniflare/package.json').version" 2>/dev/null)," \
    "wrangler $(node -p "require('$ROOT/node_modules/wrangler/package.json').version" 2>/dev/null); Switchyard at $commit."
}

# write_generated FILE SECTION_FILE NAME: puts SECTION_FILE's text into FILE between the markers
# `<!-- NAME: generated from here -->` and `<!-- NAME: generated up to here -->` (the text around
# them is kept); appends the block when FILE has no markers yet.
write_generated() {
  python3 - "$1" "$2" "$3" <<'PY'
import os, sys
path, section, name = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
begin, end = f"<!-- {name}: generated from here -->", f"<!-- {name}: generated up to here -->"
block = f"{begin}\n{section.rstrip()}\n{end}"
if os.path.exists(path):
    text = open(path).read()
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
else:
    text = block + "\n"
open(path, "w").write(text)
PY
}

# stop PID...: stops processes and their children.
stop() {
  for pid in "$@"; do
    [ -n "$pid" ] || continue
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
  done
  sleep 0.5
  for pid in "$@"; do
    [ -n "$pid" ] || continue
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  done
}
