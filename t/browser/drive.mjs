// Drives Debian's chromium (headless) for the suite: one JSON command per line on stdin, one
// JSON answer per line on stdout, so that the .t file keeps the story and the assertions and
// can change the origin between steps. Never downloads a browser: playwright-core only,
// with the chromium given in CHROMIUM (default /usr/bin/chromium).
//
// Usage: node drive.mjs PROFILE_DIR
// Commands ({"op": ...}):
//   open {url}                      load a page, remember its origin (the report starts
//                                   afresh)
//   firstrender {url, rows}         load a page and time it: milliseconds from navigation
//                                   start until the list holds `rows` breakers (#list's
//                                   data-breakers, or as many breaker rows in it: the page
//                                   before issue 26 drew every row) and a frame is painted
//                                   (scripts/measure-status)
//   longtasks {seconds}             the page's main-thread long tasks (over 50 ms) and the
//                                   polls answered over that many seconds
//   row {upstream, route | server, state?, timeout_ms?}
//                                   wait for the breaker's (or the upstream's server's) row,
//                                   in that state, and describe it: its text, state label and
//                                   colour, buttons, history paths, and each cell's text by
//                                   column (cells.limit, cells.failures, ...) and tooltip
//                                   (titles.limit, ...)
//   rows {}                         every row drawn, in order: "upstream/route state" for a
//                                   breaker, "upstream server address state" for a server;
//                                   the counts bar, the status line, how many rows the list
//                                   holds (aria-rowcount) and how many are drawn
//   fleet {}                        the fleet line and each peer's reachability and text
//   click {upstream, route | server, action, confirm}
//                                   press a control button, accept or dismiss its dialog
//   press {key, confirm?}           press a key where the focus is (a dialog it opens is
//                                   accepted or dismissed); answers the focused element and
//                                   the active row
//   text {selector, timeout_ms?}    wait for an element, answer its text
//   fill {selector, value}          type into an input
//   screenshot {path}
//   viewport {width, height}       resize the window's viewport
//   layout {}                      whether the page fits the viewport: the document's
//                                   scrollWidth and the window's innerWidth, and every
//                                   drawn button, the status line and the header's parts
//                                   that end past the viewport's right edge
//   report {}                       console errors, page errors, CSP violations, requests
//                                   that left the page's origin
//   quit {}
// Answers: {"ok": true, ...} or {"ok": false, "error": "..."}, with the command's "id" if it
// had one (so that a caller that gave up waiting for an answer can skip it when it comes).

import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';

const profile = process.argv[2];
if (!profile) {
  console.error('usage: node drive.mjs PROFILE_DIR');
  process.exit(2);
}

const launch = () => chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  // Root in a container: no sandbox. Nothing may reach the network but the page's origin.
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1400, height: 700 },
  timeout: 30000,
});

let origin = null, lastUrl = null, restarts = 0;
const consoleErrors = [], pageErrors = [], offsite = [];
let dialogAnswer = null, lastDialog = null;
let context, page;

// CSP violations are reported to the page itself: collect them from the first script on.
async function start() {
  context = await launch();
  page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(10000);
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
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation',
      e => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
}
await start();

// The browser's own end (a renderer or the browser gone: seen on a machine under heavy
// load) is the test's process failing, not the page: start it again on the page last
// opened and ask once more. It is said on stderr and counted in `report`.
const closed = e => /has been closed|Target closed|crashed/i.test(String(e && e.message || e));
async function restart(why) {
  restarts++;
  console.error(`drive.mjs: the browser ended (${why}); started again on ${lastUrl}`);
  try { await context.close(); } catch (e) { /* already gone */ }
  await start();
  if (lastUrl) await page.goto(lastUrl, { waitUntil: 'load' });
}

const rowSel = (u, r, server, proxy) => `.row[data-upstream=${JSON.stringify(u)}]` +
  (server !== undefined ? `[data-server=${JSON.stringify(server)}]` : `[data-route=${JSON.stringify(r)}]`) +
  (proxy !== undefined ? `[data-proxy=${JSON.stringify(proxy)}]` : '');

async function describe(sel) {
  return page.$eval(sel, el => {
    const st = el.querySelector('.st');
    const buttons = [...el.querySelectorAll('button[data-action]')];
    const spark = [...el.querySelectorAll('svg path')].map(p => [p.getAttribute('class'), p.getAttribute('d') || '']);
    return {
      state: el.dataset.state,
      active: el.classList.contains('active'),
      cells: Object.fromEntries([...el.children].filter(c => c.dataset.col)
        .map(c => [c.dataset.col, c.innerText.replace(/\s+/g, ' ').trim()])),
      // Each cell's tooltip, which the page makes when the pointer comes over it.
      titles: Object.fromEntries([...el.children].filter(c => c.dataset.col).map(c => {
        c.dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
        return [c.dataset.col, c.title];
      })),
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
    lastUrl = url;
    for (const a of [consoleErrors, pageErrors, offsite]) a.length = 0;
    const res = await page.goto(url, { waitUntil: 'load' });
    return { status: res.status(), contentType: res.headers()['content-type'], title: await page.title() };
  },
  async firstrender({ url, rows, timeout_ms }) {
    origin = new URL(url).origin;
    await page.goto(url, { waitUntil: 'commit' });
    await page.waitForFunction(n => {
      const list = document.getElementById('list');
      return list && (Number(list.dataset.breakers || 0) >= n
        || document.querySelectorAll('#list .row[data-route]').length >= n);
    }, rows, { timeout: timeout_ms || 60000, polling: 'raf' });
    return page.evaluate(() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
      const json = performance.getEntriesByType('resource').find(e => /format=json/.test(e.name));
      done({
        ms: performance.now(),
        rows: Number(document.getElementById('list').dataset.breakers
          || document.querySelectorAll('#list .row[data-route]').length),
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
  async row({ upstream, route, server, proxy, state, timeout_ms }) {
    const any = rowSel(upstream, route, server, proxy);
    const sel = any + (state ? `[data-state=${JSON.stringify(state)}]` : '');
    try {
      await page.waitForSelector(sel, { state: 'attached', timeout: timeout_ms || 10000 });
    } catch (e) {
      return { found: false, now: await page.$(any) ? await describe(any) : null };
    }
    return { found: true, ...(await describe(sel)) };
  },
  async rows() {
    return page.evaluate(() => ({
      rows: [...document.querySelectorAll('#list .row')].filter(el => !el.hidden)
        .map(el => el.dataset.server !== undefined
          ? `${el.dataset.upstream} server ${el.dataset.server} ${el.dataset.state}`
          : `${el.dataset.upstream}/${el.dataset.route} ${el.dataset.state}`),
      counts: [...document.querySelectorAll('#counts button')].map(el => el.innerText.trim()).join(', '),
      status: document.getElementById('status').textContent,
      rowcount: Number(document.getElementById('list').getAttribute('aria-rowcount')),
      drawn: document.querySelectorAll('#list .row').length,
    }));
  },
  async fleet() {
    return page.evaluate(() => ({
      shown: !document.getElementById('fleet').hidden,
      summary: document.getElementById('fsum').textContent,
      peers: [...document.querySelectorAll('#peers .peer')].map(el => ({
        id: el.dataset.peer, reachable: el.dataset.reachable === 'true',
        label: el.querySelector('.st').textContent,
        color: getComputedStyle(el.querySelector('.st')).backgroundColor,
        text: el.innerText.replace(/\s+/g, ' ').trim(),
      })),
    }));
  },
  async press({ key, confirm }) {
    dialogAnswer = !!confirm;
    lastDialog = null;
    await page.keyboard.press(key);
    for (let i = 0; i < 10 && !lastDialog; i++) await page.waitForTimeout(20);
    if (lastDialog && confirm) await page.waitForResponse(r => r.request().method() === 'POST', { timeout: 5000 }).catch(() => {});
    await page.waitForTimeout(50);
    return page.evaluate(() => {
      const a = document.activeElement, row = document.querySelector('#list .row.active');
      return {
        focus: a ? (a.id || a.tagName.toLowerCase() + (a.dataset.action ? '[' + a.dataset.action + ']' : '')) : null,
        active: row ? (row.dataset.server !== undefined
          ? `${row.dataset.upstream} server ${row.dataset.server} ${row.dataset.state}`
          : `${row.dataset.upstream}/${row.dataset.route} ${row.dataset.state}`) : null,
      };
    }).then(r => ({ ...r, dialog: lastDialog }));
  },
  async click({ upstream, route, server, proxy, action, confirm }) {
    dialogAnswer = !!confirm;
    lastDialog = null;
    const sel = `${rowSel(upstream, route, server, proxy)} button[data-action=${JSON.stringify(action)}]`;
    await page.click(sel);
    // The dialog is handled in its event; give the page a moment to send the request.
    for (let i = 0; i < 50 && !lastDialog; i++) await page.waitForTimeout(20);
    if (confirm) await page.waitForResponse(r => r.request().method() === 'POST', { timeout: 5000 }).catch(() => {});
    return { dialog: lastDialog };
  },
  async text({ selector, timeout_ms }) {
    const el = await page.waitForSelector(selector, { state: 'attached', timeout: timeout_ms || 10000 });
    return { text: await el.evaluate(e => e.textContent) };
  },
  async fill({ selector, value }) {
    await page.fill(selector, value);
    return {};
  },
  async screenshot({ path }) {
    // A page taller than a few screens (thousands of rows) is shot as the screen shows it.
    const tall = await page.evaluate(() => document.documentElement.scrollHeight > 8000);
    await page.screenshot({ path, fullPage: !tall });
    return { path };
  },
  async viewport({ width, height }) {
    await page.setViewportSize({ width, height });
    // Two frames: the page redraws its rows on resize.
    await page.evaluate(() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done))));
    return {};
  },
  async layout() {
    return page.evaluate(() => {
      const right = innerWidth, out = [];
      const name = el => el.id || (el.dataset.action ? 'button[' + el.dataset.action + '] of '
        + (el.closest('.row') ? el.closest('.row').dataset.upstream : '?') : el.tagName.toLowerCase());
      for (const el of [...document.querySelectorAll('#list button, header .bar > *, #status')]) {
        const r = el.getBoundingClientRect();
        if (r.width > 0 && r.right > right + 0.5) out.push(`${name(el)} ends at ${Math.round(r.right)}`);
      }
      const st = document.getElementById('status').getBoundingClientRect();
      return {
        scrollWidth: document.documentElement.scrollWidth, innerWidth: right,
        innerHeight, out, status: document.getElementById('status').textContent,
        statusVisible: st.width > 0 && st.right <= right && st.left >= 0,
      };
    });
  },
  async report() {
    const csp = await page.evaluate(() => window.__csp || []);
    return { consoleErrors, pageErrors, offsite, csp, restarts };
  },
};

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
    reply({ ok: false, error: 'unknown op ' + cmd.op, id: cmd.id });
    continue;
  }
  const id = cmd.id === undefined ? {} : { id: cmd.id };
  try {
    let out;
    try {
      out = await op(cmd);
    } catch (e) {
      if (!closed(e) || restarts >= 2) throw e;
      await restart(String(e && e.message || e).split('\n')[0]);
      out = await op(cmd);
    }
    reply({ ok: true, ...out, ...id });
  } catch (e) {
    reply({ ok: false, error: String(e && e.message || e).split('\n')[0], ...id });
  }
}
await context.close();
reply({ ok: true, bye: true });
// stdin may still be open: do not wait for it.
process.exit(0);
