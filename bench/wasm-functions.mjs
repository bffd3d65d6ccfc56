// The largest functions of a Wasm module, by the size of their code (issue 36). V8 compiles a
// Wasm function whole the first time it is called, so a function that holds code a request never
// runs (every endpoint inlined into the router, say) costs a cold isolate that much compiling.
// Reads the module's code section and its `name` section (worker-build keeps the names).
//
//   node bench/wasm-functions.mjs FILE.wasm [--top N]
//
// Prints the code size and function count, then one Markdown row per function: bytes, name.

import { readFileSync } from "node:fs";

const argv = process.argv.slice(2);
const file = argv.find((a) => !a.startsWith("--"));
const topAt = argv.indexOf("--top");
const top = topAt >= 0 ? Number(argv[topAt + 1]) : 15;
if (!file) {
  console.error("usage: node bench/wasm-functions.mjs FILE.wasm [--top N]");
  process.exit(2);
}
const bytes = readFileSync(file);

// An unsigned LEB128 at `at`: [value, the offset after it].
const leb = (at) => {
  let value = 0;
  let shift = 0;
  for (;;) {
    const b = bytes[at++];
    value += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if (b < 0x80) return [value, at];
  }
};
const text = (at) => {
  const [len, start] = leb(at);
  return [bytes.toString("utf8", start, start + len), start + len];
};

let imported = 0; // imported functions come first in the function index space
const sizes = [];
const names = new Map();
for (let at = 8; at < bytes.length; ) {
  const id = bytes[at];
  const [len, start] = leb(at + 1);
  const end = start + len;
  if (id === 2) {
    let [count, p] = leb(start);
    for (; count > 0; count--) {
      [, p] = text(p); // module
      [, p] = text(p); // field
      const kind = bytes[p++];
      if (kind === 0) [, p] = leb(p), imported++;
      else if (kind === 1) { p++; let flags; [flags, p] = leb(p); [, p] = leb(p); if (flags & 1) [, p] = leb(p); }
      else if (kind === 2) { let flags; [flags, p] = leb(p); [, p] = leb(p); if (flags & 1) [, p] = leb(p); }
      else if (kind === 3) p += 2;
      else if (kind === 4) { p++; [, p] = leb(p); }
    }
  } else if (id === 10) {
    let [count, p] = leb(start);
    for (; count > 0; count--) {
      const [size, body] = leb(p);
      sizes.push(size);
      p = body + size;
    }
  } else if (id === 0) {
    let [name, p] = text(start);
    if (name === "name") {
      while (p < end) {
        const sub = bytes[p];
        const [subLen, subStart] = leb(p + 1);
        if (sub === 1) {
          let [count, q] = leb(subStart);
          for (; count > 0; count--) {
            let index, fn;
            [index, q] = leb(q);
            [fn, q] = text(q);
            names.set(index, fn);
          }
        }
        p = subStart + subLen;
      }
    }
  }
  at = end;
}

const total = sizes.reduce((a, b) => a + b, 0);
console.log(`${file}: ${sizes.length} functions, ${total} bytes of code\n`);
console.log("| bytes | function |\n|---|---|");
sizes
  .map((size, i) => [size, names.get(imported + i) ?? `#${imported + i}`])
  .sort((a, b) => b[0] - a[0])
  .slice(0, top)
  .forEach(([size, name]) => console.log(`| ${size} | \`${name.replace(/\|/g, "\\|").slice(0, 140)}\` |`));
