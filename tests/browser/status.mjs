// The status page in a real browser (issue 16): headless Chromium (Debian's, driven by
// playwright-core) opens `/status` at phone (390 px) and desktop (1280 px) width, saves a
// screenshot of the first screen of each, and checks what a visitor relies on:
//   - every model of `GET /api/health/models` is listed, with its status word;
//   - no horizontal scroll at 390 px;
//   - colour is never the only signal: every status and every route state is a word;
//   - the page says when it was computed and refreshes itself.
//
//   node tests/browser/status.mjs <gateway URL> <screenshot dir>
//
// Prints one line per check and `N passed, M failed` (the count scripts/test adds up); exits 1 on a
// failure.

import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [base, outDir] = process.argv.slice(2);
if (!base || !outDir) {
  console.error("usage: node tests/browser/status.mjs <gateway URL> <screenshot dir>");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });

let passed = 0;
let failed = 0;
const check = (name, ok, detail = "") => {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok || !detail ? "" : `: ${detail}`}`);
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu"],
});
try {
  for (const [device, width] of [
    ["phone", 390],
    ["desktop", 1280],
  ]) {
    const page = await browser.newPage({ viewport: { width, height: 844 } });
    // The API just before and just after the page: a word can change between two reports (time
    // alone turns a model whose evidence got old into "Not recently verified"), so the page's word
    // must be one of the two.
    const before = await (await fetch(`${base}/api/health/models`)).json();
    const response = await page.goto(`${base}/status`);
    check(`${device}: /status answers 200`, response.status() === 200, String(response.status()));
    const api = await (await fetch(`${base}/api/health/models`)).json();
    const earlier = new Map(before.models.map((m) => [m.id, m.label]));
    // The first screen, as a visitor sees it (the whole page can be thousands of pixels tall).
    await page.screenshot({ path: `${outDir}/status-${device}.png` });
    const seen = await page.evaluate(() => ({
      scrollWidth: document.documentElement.scrollWidth,
      innerWidth: window.innerWidth,
      models: [...document.querySelectorAll("section")].map((s) => ({
        id: s.querySelector("h2 span")?.textContent ?? "",
        word: s.querySelector("h2 .w")?.textContent?.trim() ?? "",
        states: [...s.querySelectorAll("tr td:nth-child(3)")].map((td) => td.textContent.trim()),
      })),
      refresh: document.querySelector('meta[http-equiv="refresh"]')?.getAttribute("content") ?? "",
      text: document.body.innerText,
    }));
    const byId = new Map(seen.models.map((m) => [m.id, m]));
    const missing = api.models
      .filter((m) => ![m.label, earlier.get(m.id)].includes(byId.get(m.id)?.word))
      .map((m) => m.id);
    check(
      `${device}: all ${api.models.length} models listed with their status word`,
      api.models.length > 0 && missing.length === 0,
      `missing or wrong word: ${missing.slice(0, 5).join(", ")}`,
    );
    const wordless = seen.models.filter((m) => !m.word || m.states.some((s) => !/[a-z]/.test(s)));
    check(`${device}: every status and route state is a word, not only a colour`, wordless.length === 0, JSON.stringify(wordless[0]));
    if (width === 390)
      check(
        "phone: no horizontal scroll at 390 px",
        seen.scrollWidth <= seen.innerWidth,
        `scrollWidth ${seen.scrollWidth} > ${seen.innerWidth}`,
      );
    check(
      `${device}: says when it was computed and refreshes itself`,
      /updated \d{4}-\d\d-\d\d|updated \d\d:\d\d/.test(seen.text) && Number(seen.refresh) > 0,
      `refresh=${seen.refresh}`,
    );
    await page.close();
  }
} finally {
  await browser.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
