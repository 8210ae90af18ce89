// Drives Debian's chromium (headless) for the suite: one JSON command per line on stdin, one
// JSON answer per line on stdout, so that the .t file keeps the story and the assertions and
// can change the origin between steps. Never downloads a browser: playwright-core only,
// with the chromium given in CHROMIUM (default /usr/bin/chromium).
//
// Usage: node drive.mjs PROFILE_DIR
// Commands ({"op": ...}):
//   open {url}                      load a page, remember its origin
//   firstrender {url, rows}         load a page and time it: milliseconds from navigation
//                                   start until `rows` breaker rows are in the list and a
//                                   frame is painted (scripts/measure-status)
//   longtasks {seconds}             the page's main-thread long tasks (over 50 ms) and the
//                                   polls answered over that many seconds
//   row {upstream, route, state?, timeout_ms?}
//                                   wait for the breaker's row (in that state), describe it
//   rows {}                         every visible row's "upstream/route state", in order
//   click {upstream, route, action, confirm}
//                                   press a control button, accept or dismiss its dialog
//   fill {selector, value}          type into an input
//   screenshot {path}
//   report {}                       console errors, page errors, CSP violations, requests
//                                   that left the page's origin
//   quit {}
// Answers: {"ok": true, ...} or {"ok": false, "error": "..."}.

import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';

const profile = process.argv[2];
if (!profile) {
  console.error('usage: node drive.mjs PROFILE_DIR');
  process.exit(2);
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  // Root in a container: no sandbox. Nothing may reach the network but the page's origin.
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1400, height: 700 },
  timeout: 30000,
});
const page = context.pages()[0] || await context.newPage();
page.setDefaultTimeout(10000);

let origin = null;
const consoleErrors = [], pageErrors = [], offsite = [];
let dialogAnswer = null, lastDialog = null;
page.on('console', m => { if (m.type() === 'error') consoleErrors.push(m.text()); });
page.on('pageerror', e => pageErrors.push(String(e)));
page.on('request', r => {
  const url = r.url();
  if (origin && !url.startsWith(origin + '/') && !url.startsWith('data:')) offsite.push(url);
});
page.on('dialog', async d => {
  lastDialog = { type: d.type(), message: d.message() };
  if (dialogAnswer) await d.accept(); else await d.dismiss();
});

const rowSel = (u, r) => `.row[data-upstream=${JSON.stringify(u)}][data-route=${JSON.stringify(r)}]`;

async function describe(sel) {
  return page.$eval(sel, el => {
    const st = el.querySelector('.st');
    const buttons = [...el.querySelectorAll('button[data-action]')];
    const spark = [...el.querySelectorAll('svg path')].map(p => [p.getAttribute('class'), p.getAttribute('d') || '']);
    return {
      state: el.dataset.state,
      label: st.textContent,
      color: getComputedStyle(st).backgroundColor,
      text: el.innerText.replace(/\s+/g, ' ').trim(),
      visible: !el.hidden && el.getClientRects().length > 0,
      buttons: buttons.filter(b => b.getClientRects().length > 0).map(b => b.dataset.action),
      spark: Object.fromEntries(spark),
    };
  });
}

const ops = {
  async open({ url }) {
    origin = new URL(url).origin;
    const res = await page.goto(url, { waitUntil: 'load' });
    return { status: res.status(), contentType: res.headers()['content-type'], title: await page.title() };
  },
  async firstrender({ url, rows, timeout_ms }) {
    origin = new URL(url).origin;
    await page.goto(url, { waitUntil: 'commit' });
    await page.waitForFunction(n => document.querySelectorAll('#list .row[data-route]').length >= n,
      rows, { timeout: timeout_ms || 60000, polling: 'raf' });
    return page.evaluate(() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
      const json = performance.getEntriesByType('resource').find(e => /format=json/.test(e.name));
      done({
        ms: performance.now(),
        rows: document.querySelectorAll('#list .row[data-route]').length,
        json_ms: json ? json.responseEnd : null,
        json_bytes: json ? json.transferSize : null,
        heap_bytes: performance.memory ? performance.memory.usedJSHeapSize : null,
      });
    }))));
  },
  async longtasks({ seconds }) {
    return page.evaluate(s => new Promise(done => {
      let total = 0, count = 0, polls = 0;
      const tasks = new PerformanceObserver(l => {
        for (const e of l.getEntries()) { total += e.duration; count++; }
      });
      tasks.observe({ type: 'longtask' });
      const fetches = new PerformanceObserver(l => {
        polls += l.getEntries().filter(e => /format=json/.test(e.name)).length;
      });
      fetches.observe({ type: 'resource' });
      setTimeout(() => {
        tasks.disconnect();
        fetches.disconnect();
        done({ total_ms: total, count, polls, seconds: s });
      }, s * 1000);
    }), seconds);
  },
  async row({ upstream, route, state, timeout_ms }) {
    const sel = rowSel(upstream, route) + (state ? `[data-state=${JSON.stringify(state)}]` : '');
    try {
      await page.waitForSelector(sel, { state: 'attached', timeout: timeout_ms || 10000 });
    } catch (e) {
      const any = await page.$(rowSel(upstream, route));
      return { found: false, now: any ? await describe(rowSel(upstream, route)) : null };
    }
    return { found: true, ...(await describe(sel)) };
  },
  async rows() {
    return {
      rows: await page.$$eval('#list .row', els => els.filter(el => !el.hidden)
        .map(el => `${el.dataset.upstream}/${el.dataset.route} ${el.dataset.state}`)),
      counts: await page.$$eval('#counts button', els => els.map(el => el.innerText.trim()).join(', ')),
      status: await page.$eval('#status', el => el.textContent),
    };
  },
  async click({ upstream, route, action, confirm }) {
    dialogAnswer = !!confirm;
    lastDialog = null;
    const sel = `${rowSel(upstream, route)} button[data-action=${JSON.stringify(action)}]`;
    await page.click(sel);
    // The dialog is handled in its event; give the page a moment to send the request.
    for (let i = 0; i < 50 && !lastDialog; i++) await page.waitForTimeout(20);
    if (confirm) await page.waitForResponse(r => r.request().method() === 'POST', { timeout: 5000 }).catch(() => {});
    return { dialog: lastDialog };
  },
  async fill({ selector, value }) {
    await page.fill(selector, value);
    return {};
  },
  async screenshot({ path }) {
    await page.screenshot({ path, fullPage: true });
    return { path };
  },
  async report() {
    const csp = await page.evaluate(() => window.__csp || []);
    return { consoleErrors, pageErrors, offsite, csp };
  },
};

// CSP violations are reported to the page itself: collect them from the first script on.
await page.addInitScript(() => {
  window.__csp = [];
  document.addEventListener('securitypolicyviolation',
    e => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
});

const rl = createInterface({ input: process.stdin });
const reply = obj => process.stdout.write(JSON.stringify(obj) + '\n');
for await (const line of rl) {
  if (!line.trim()) continue;
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (e) {
    reply({ ok: false, error: 'bad command: ' + line });
    continue;
  }
  if (cmd.op === 'quit') break;
  const op = ops[cmd.op];
  if (!op) {
    reply({ ok: false, error: 'unknown op ' + cmd.op });
    continue;
  }
  try {
    reply({ ok: true, ...(await op(cmd)) });
  } catch (e) {
    reply({ ok: false, error: String(e && e.message || e).split('\n')[0] });
  }
}
await context.close();
reply({ ok: true, bye: true });
// stdin may still be open: do not wait for it.
process.exit(0);
