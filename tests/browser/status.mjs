// The status page in a real browser (issues 16, 26): headless Chromium (Debian's, driven by
// playwright-core) opens `/status` at phone (375 px) and desktop (1280 px) width, saves a
// screenshot of the first screen of each and of one model's section, and checks what a visitor
// relies on:
//   - every model of `GET /api/health/models` is listed, with its status word;
//   - no horizontal scroll at 375 px;
//   - colour is never the only signal: every status, route state and history bar is a word;
//   - each model shows its last 24 hours as bars, each with its hour and word as text, and a
//     model with an outage an hour or two ago shows it in that hour's bar;
//   - each route has its last-hour chart: an SVG image with a title and a text list;
//   - a legend names the colours; the page says when it was computed and refreshes itself.
//
//   node tests/browser/status.mjs <gateway URL> <screenshot dir>
//
// With ADMIN_TOKEN and MOCK_URL set (scripts/test sets them) it first adds two models of its own:
// one whose route answers 503, sent three requests with the history drill
// (`x-switchyard-test-fault: past-<ms>`, honoured only under SWITCHYARD_TEST_FAULTS) — they fail
// now, and route health learns of them as of the middle of an hour one or two hours back, out of
// the last hour — and one sent four streams now, which its chart shows.

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

const HOUR = 3_600_000;
const pad = (n) => String(n).padStart(2, "0");
const hourLabel = (ms) => `${pad(new Date(ms).getUTCHours())}:00 UTC`;

/// Adds two models of its own: one whose requests an hour ago all failed, one answering streams
/// now; returns their ids and the hour of the outage (`null` without ADMIN_TOKEN and MOCK_URL).
async function modelsOfOurOwn() {
  const { ADMIN_TOKEN: token, MOCK_URL: mock } = process.env;
  if (!token || !mock) return null;
  const tag = `browser-${process.pid}-${Date.now().toString(36)}`;
  const admin = async (method, path, body) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: body && JSON.stringify(body),
    });
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
    return r.json();
  };
  const addModel = async (name, scenario) => {
    await admin("PUT", `/admin/providers/p-${name}-${tag}`, { base_url: `${mock}/${tag}/${scenario}`, auth: "bearer" });
    const model = `${name}-${tag}`;
    await admin("PUT", `/admin/models/${model}`, {
      context_window: 8192,
      max_output_tokens: 1024,
      routes: [{ id: "r0", provider: `p-${name}-${tag}`, upstream_model: "u", apis: ["chat"], verify: false,
                 price: { input_per_mtok: 1, output_per_mtok: 2 } }],
    });
    return model;
  };
  const outage = await addModel("outage", "status/503");
  const steady = await addModel("steady", "ok");
  const account = await admin("POST", "/admin/accounts", {});
  await admin("POST", `/admin/accounts/${account.id}/credit`, { amount_usd: 1 });
  const { key } = await admin("POST", "/admin/keys", { account_id: account.id });
  const ask = async (model, stream, headers = {}) => {
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
      body: JSON.stringify({ model, stream, messages: [{ role: "user", content: "Say hello" }] }),
    });
    await r.arrayBuffer();
  };
  // The middle of an hour that ended over ten minutes before the last hour began.
  const now = Date.now();
  const hour = Math.floor((now - 100 * 60_000) / HOUR) * HOUR;
  const ago = now - (hour + HOUR / 2);
  for (let i = 0; i < 3; i++) await ask(outage, false, { "x-switchyard-test-fault": `past-${ago}` });
  for (let i = 0; i < 4; i++) await ask(steady, true);
  // The report reaches the model's object just after each answer, and the report is cached per
  // isolate for a few seconds: wait until the API shows both.
  for (let i = 0; i < 50; i++) {
    const api = await (await fetch(`${base}/api/health/models`)).json();
    const m = api.models.find((x) => x.id === outage);
    const s = api.models.find((x) => x.id === steady);
    if (m?.history?.some((h) => h.start_ms === hour && h.status === "down") && s?.history?.at(-1)?.answered === 4) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  return { model: outage, steady, hour };
}

const outage = await modelsOfOurOwn();
const words = ["Operational", "Degraded", "Down", "No requests"];

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu"],
});
try {
  for (const [device, width] of [
    ["phone", 375],
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
        bars: [...s.querySelectorAll(".strip [role=listitem]")].map((b) => ({
          text: b.textContent.trim(),
          width: b.getBoundingClientRect().width,
        })),
        routes: s.querySelectorAll("tr").length - 1,
        charts: [...s.querySelectorAll("figure")].map((f) => {
          const svg = f.querySelector("svg");
          const box = svg?.getBoundingClientRect();
          const section = f.closest("section").getBoundingClientRect();
          return {
            img: svg?.getAttribute("role") === "img",
            title: svg?.querySelector("title")?.textContent ?? "",
            labelled: svg ? document.getElementById(svg.getAttribute("aria-labelledby") ?? "")?.tagName : null,
            items: [...f.querySelectorAll("li")].map((li) => li.textContent),
            inside: !!box && box.width > 0 && box.right <= section.right + 0.5,
          };
        }),
      })),
      legend: [...document.querySelectorAll(".legend")].map((l) => l.textContent).join(" "),
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
    // The history: 24 bars per model, each with its hour and word as text, all visible.
    const badBars = seen.models.filter(
      (m) =>
        m.bars.length !== 24 ||
        m.bars.some((b) => !/^\d\d:00 UTC: (Operational|Degraded|Down|No requests)\b/.test(b.text) || b.width < 4),
    );
    check(
      `${device}: every model has 24 hourly bars, each with its hour and word as text`,
      seen.models.length > 0 && badBars.length === 0,
      JSON.stringify(badBars[0] && { id: badBars[0].id, bars: badBars[0].bars.slice(0, 3), n: badBars[0].bars.length }),
    );
    // Oldest first, the last one the current hour (the page may be from just before an hour began).
    const hours = seen.models[0]?.bars.map((b) => b.text.slice(0, 9)) ?? [];
    const runUpTo = (end) => hours.every((h, i) => h === hourLabel(end - (23 - i) * HOUR));
    check(
      `${device}: the bars run hour by hour up to the current one`,
      hours.length === 24 &&
        (runUpTo(Date.now()) || runUpTo(Date.now() - 60_000)) &&
        /this hour so far/.test(seen.models[0].bars[23].text),
      hours.join(" "),
    );
    if (outage) {
      const bars = byId.get(outage.model)?.bars ?? [];
      const bar = bars.find((b) => b.text.startsWith(hourLabel(outage.hour)));
      check(
        `${device}: a model with an outage an hour ago shows it in that hour's bar, not in its present word`,
        bars.length === 24 && /: Down, 0 of 3 answered/.test(bar?.text ?? "") &&
          byId.get(outage.model)?.word === "No recent requests",
        JSON.stringify(bar),
      );
      const steady = byId.get(outage.steady);
      const points = steady?.charts[0]?.items ?? [];
      check(
        `${device}: a route answering now shows it in the last point of its chart`,
        /: 100 % success of 4, median time to first content \d+ ms$/.test(points.at(-1) ?? "") &&
          /(this hour so far)/.test(steady?.bars[23]?.text ?? ""),
        JSON.stringify(points.at(-1)),
      );
      for (const [name, id] of [["outage", outage.model], ["steady", outage.steady]])
        await page.locator("section").filter({ hasText: id }).screenshot({ path: `${outDir}/status-${device}-${name}.png` });
    }
    const badCharts = seen.models.filter(
      (m) =>
        m.charts.length !== m.routes ||
        m.charts.some((c) => !c.img || !c.title.includes("success rate") || c.labelled !== "title" ||
          c.items.length !== 12 || !c.items.every((t) => /^\d\d:\d\d–\d\d:\d\d UTC: /.test(t)) || !c.inside),
    );
    check(
      `${device}: every route has its last-hour chart (an SVG image with a title and a 12-point text list, inside its section)`,
      badCharts.length === 0,
      JSON.stringify(badCharts[0] && { id: badCharts[0].id, routes: badCharts[0].routes, chart: badCharts[0].charts[0] }),
    );
    check(
      `${device}: a legend names every colour`,
      [...words, "median time to first content"].every((w) => seen.legend.includes(w)),
      seen.legend,
    );
    if (width === 375)
      check(
        "phone: no horizontal scroll at 375 px",
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
