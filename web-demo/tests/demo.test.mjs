// Browser tests of the demo: a real Chromium (Debian's) driven by playwright-core, against
// the page served on 127.0.0.1 with the real wasm core. Run by scripts/test-demo.sh, which
// sets DEMO_URL. The page's ?test mode only removes animation delays; every assertion reads
// the DOM the learner sees. Screenshots of each scene's final frame go to web-demo/test-output/.

import { test, before, after, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { mkdirSync, copyFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const require = createRequire(path.join(root, 'tools', 'package.json'));
const { chromium } = require('playwright-core');

const BASE = process.env.DEMO_URL;
if (!BASE) throw new Error('DEMO_URL is not set: run scripts/test-demo.sh');
const OUT = path.join(root, 'web-demo', 'test-output');
mkdirSync(OUT, { recursive: true });

let browser;
let page;
let problems; // console errors and uncaught page errors of the current test

before(async () => {
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});
after(async () => {
  await browser?.close();
});
beforeEach(async () => {
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
});
afterEach(async () => {
  await page.close();
  assert.deepEqual(problems, [], 'no console errors');
});

async function open(scene = 1, size) {
  if (size) await page.setViewportSize(size);
  await page.goto(`${BASE}?test&scene=${scene}`);
  await page.waitForSelector('body[data-ready="1"]');
}

const text = (sel) => page.locator(sel).innerText();

/** Plays with the play button until the last step (no sleeping: waits on the page's state). */
async function playToEnd() {
  await page.locator('[data-testid=speed]').fill('3');
  await page.keyboard.press('Space');
  await page.waitForSelector('body[data-playing="false"][data-at-end="true"]');
}

async function jumpToEnd() {
  await page.click('[data-testid=end]');
  await page.waitForSelector('body[data-at-end="true"]');
}

async function setSwitch(name, on) {
  const sw = page.locator(`[data-testid=param-${name}]`);
  if ((await sw.isChecked()) !== on) await sw.click({ force: true });
  assert.equal(await sw.isChecked(), on);
}

async function setSlider(name, value) {
  await page.locator(`[data-testid=param-${name}]`).fill(String(value));
}

async function shot(name) {
  // Grow the viewport to the whole page first, so the sticky transport bar sits at the
  // bottom of the picture as it does at the end of a scrolled page.
  await page.evaluate(() => document.activeElement?.blur());
  const size = page.viewportSize();
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  await page.setViewportSize({ width: size.width, height });
  const file = path.join(OUT, `${name}.png`);
  await page.screenshot({ path: file });
  await page.setViewportSize(size);
  return file;
}

/** Everything a learner sees of the model, for comparing two visits of the same step. */
async function snapshot() {
  return page.evaluate(() => ({
    clock: document.querySelector('[data-testid=clock]').textContent,
    caption: document.querySelector('[data-testid=caption]').textContent,
    stage: document.querySelector('[data-testid=stage]').innerHTML,
    swimlane: document.querySelector('[data-testid=swimlane]').innerHTML,
    state: document.querySelector('[data-testid=state]').innerHTML,
    log: document.querySelector('[data-testid=log]').innerText,
  }));
}

async function scrubTo(step) {
  await page.locator('[data-testid=scrubber]').fill(String(step));
  await page.waitForFunction((s) => document.querySelector('[data-testid=clock]').dataset.step === String(s), step);
}

test('scene 1, fencing on: played to the end, the storage refuses 34 as stale and accepted 35', async () => {
  await open(1);
  await setSwitch('fencing', true);
  await playToEnd();
  assert.match(await text('[data-testid=refused-34]'), /34 < 35/);
  // A's first write (34, before its pause), then B's two (35); A's late 34 was refused
  assert.deepEqual(await page.locator('[data-testid^=accepted-]').allTextContents(), ['34', '35', '35']);
  assert.equal(await page.locator('[data-testid=highest]').textContent(), '35');
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'fenced');
  assert.match(await text('[data-testid=outcome]'), /34 refused \(stale: 34 < 35\).*35 accepted/);
  assert.doesNotMatch(await text('[data-testid=stage]'), /DATA CORRUPTED/);
  // the event log shows the core's real outputs of the story, in order
  const log = await text('[data-testid=log]');
  const order = ['granted {session: 2, lock: "jobs/reindex", mode: "exclusive", token: 34}', 'sessionExpired {session: 2}', 'granted {session: 3, lock: "jobs/reindex", mode: "exclusive", token: 35}', 'refused (stale: 34 < 35)'];
  let at = -1;
  for (const s of order) {
    const i = log.indexOf(s);
    assert.ok(i > at, `log has "${s}" after the previous event`);
    at = i;
  }
  await shot('scene-1-fenced');
  // the README's picture: one step back, the moment the storage refuses A's stale write
  await page.keyboard.press('ArrowLeft');
  assert.match(await text('[data-testid=caption]'), /t4 — A's pause ends.*refused as stale/);
  copyFileSync(await shot('scene-1-refusal'), path.join(root, 'web-demo', 'screenshot.png'));
});

test('scene 1, fencing off: A\'s stale write lands and the data is shown corrupted', async () => {
  await open(1);
  await setSwitch('fencing', false);
  await jumpToEnd();
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'corrupted');
  assert.match(await text('[data-testid=stage]'), /DATA CORRUPTED/);
  assert.match(await text('[data-testid=accepted-34]:last-of-type'), /stale/);
  assert.equal(await page.locator('[data-testid^=refused-]').count(), 0);
  assert.match(await text('[data-testid=caption]'), /corrupted/i);
  await shot('scene-1-unfenced');
});

test('scene 1: scrubbing back replays into a fresh core and forward gives the same state', async () => {
  await open(1);
  await jumpToEnd();
  const end = await snapshot();
  const length = Number(await page.getAttribute('[data-testid=clock]', 'data-length'));
  await scrubTo(5);
  const early = await snapshot();
  assert.notDeepEqual(early, end);
  assert.equal(await page.locator('[data-testid=refused-34]').count(), 0, 'at t=4 nothing was refused yet');
  await scrubTo(length);
  assert.deepEqual(await snapshot(), end);
  // one step back with the keyboard and one forward: the same again
  await page.locator('[data-testid=stage]').click({ position: { x: 5, y: 5 } });
  await page.keyboard.press('ArrowLeft');
  assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), String(length - 1));
  await page.keyboard.press('ArrowRight');
  assert.deepEqual(await snapshot(), end);
  // and scrubbing to the middle twice gives the same picture both times
  await scrubTo(12);
  const mid = await snapshot();
  await scrubTo(2);
  await scrubTo(12);
  assert.deepEqual(await snapshot(), mid);
});

test('scene 1: a pause shorter than the session timeout changes the outcome — nothing goes wrong', async () => {
  await open(1);
  await setSwitch('fencing', false);
  await setSlider('pause', 5);
  await jumpToEnd();
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'ok');
  assert.doesNotMatch(await text('[data-testid=log]'), /sessionExpired/);
  assert.doesNotMatch(await text('[data-testid=stage]'), /DATA CORRUPTED/);
  assert.match(await text('[data-testid=caption]'), /shorter than the session timeout/);
});

test('scene 1: a longer timeout only moves the window — expiry comes later, the stale write still lands', async () => {
  await open(1);
  await setSwitch('fencing', false);
  await setSlider('ttl', 30);
  await setSlider('pause', 45);
  await jumpToEnd();
  const log = await page.locator('[data-testid=log] li').allInnerTexts();
  const expiry = log.find((l) => l.includes('sessionExpired {session: 2}'));
  assert.ok(expiry, 'A expires');
  assert.match(expiry, /^t=30/, 'at its last heartbeat (t=0) + the 30 s timeout');
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'corrupted');
});

test('scene 1: clicking a client to kill it rewrites the future from that point', async () => {
  await open(1);
  await page.click('[data-testid=client-A]');
  await page.click('[data-testid=menu-kill]');
  assert.match(await text('[data-testid=caption]'), /You killed A at t=0/);
  assert.equal(await page.getAttribute('[data-testid=client-A]', 'data-status'), 'dead');
  await jumpToEnd();
  // A never wrote; its session expired by itself and B did the work with 35
  assert.equal(await page.locator('[data-testid=accepted-34]').count(), 0);
  assert.equal(await page.locator('[data-testid=accepted-35]').count(), 2);
  assert.match(await text('[data-testid=log]'), /sessionExpired \{session: 2\}/);
});

test('scene 1: keyboard — focus a client, Enter opens its menu, pause it, then resume it', async () => {
  await open(1);
  await page.focus('[data-testid=client-B]');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#menu:not([hidden])');
  await page.keyboard.press('Enter'); // first item: pause
  assert.equal(await page.getAttribute('[data-testid=client-B]', 'data-status'), 'paused');
  await page.focus('[data-testid=client-B]');
  await page.keyboard.press('Enter');
  assert.equal(await page.locator('[data-testid=menu-resume]').count(), 1);
  await page.click('[data-testid=menu-resume]');
  assert.equal(await page.getAttribute('[data-testid=client-B]', 'data-status'), 'running');
  await page.keyboard.press('3');
  assert.equal(await page.getAttribute('[data-testid=tab-3]', 'aria-pressed'), 'true');
});

test('scene 2: the ordered queue wakes exactly one waiter per release; the herd wastes wake-ups on Busy', async () => {
  await open(2);
  await playToEnd();
  const q = page.locator('[data-testid=counters-queue]');
  const h = page.locator('[data-testid=counters-herd]');
  assert.equal(await q.getAttribute('data-wakeups'), '6', 'six waiters, six wake-ups');
  assert.equal(await q.getAttribute('data-wasted'), '0');
  const wasted = Number(await h.getAttribute('data-wasted'));
  // every wasted wake-up is a real Busy answer of the herd's core after the first release
  const lines = await page.locator('[data-testid=log] li').allInnerTexts();
  const busyAfterStart = lines.filter((l) => !l.startsWith('t=0') && /Herd\s+busy \{/.test(l)).length;
  assert.equal(wasted, busyAfterStart);
  assert.equal(wasted, 15, '5 + 4 + 3 + 2 + 1 losers of the six races');
  assert.equal(await h.getAttribute('data-wakeups'), '21');
  await shot('scene-2');
});

test('scene 3: the token is the epoch; the old leader\'s action bounces off the downstream gate', async () => {
  await open(3);
  await playToEnd();
  assert.match(await text('[data-testid=refused-7]'), /7 < 8/);
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'fenced');
  assert.match(await text('[data-testid=outcome]'), /epoch 7 bounced.*leader N2, epoch 8/);
  assert.equal(await page.locator('[data-testid=highest]').textContent(), '8');
  await shot('scene-3');
});

test('scene 4: async replication ends with two holders; the consensus group keeps one', async () => {
  await open(4);
  await playToEnd();
  assert.equal(await text('[data-testid=holders-redis]'), '2');
  assert.equal(await text('[data-testid=holders-raft]'), '1');
  assert.equal(await page.getAttribute('[data-testid=replica-P]', 'data-alive'), 'false');
  assert.equal(await page.getAttribute('[data-testid=replica-N1]', 'data-alive'), 'false');
  assert.equal(await page.getAttribute('[data-testid=client-B2]', 'data-badge'), 'queued #1');
  await shot('scene-4');
});

test('scene 4: a replica that keeps up (lag 1) is safe too — the slider changes the outcome', async () => {
  await open(4);
  await setSlider('lag', 1);
  await jumpToEnd();
  assert.equal(await text('[data-testid=holders-redis]'), '1');
});

test('scene 5: ShardPay — lease 30 s, 45 s pause, token 42 gets 412 Precondition Failed, 43 is the output', async () => {
  await open(5);
  await playToEnd();
  assert.match(await text('[data-testid=refused-42]'), /42 < 43/);
  assert.ok((await page.locator('[data-testid=accepted-43]').count()) >= 1);
  assert.match(await text('[data-testid=log]'), /with token 42 → 412 Precondition Failed \(stale: 42 < 43\)/);
  assert.match(await text('[data-testid=log]'), /sessionExpired/);
  const expiry = (await page.locator('[data-testid=log] li').allInnerTexts()).find((l) => l.includes('sessionExpired'));
  assert.match(expiry, /^t=40/, 'renewed at t=10, 30 s lease');
  await shot('scene-5');
});

test('phone width (390 px): no horizontal scrolling, every scene still renders', async () => {
  await open(1, { width: 390, height: 844 });
  for (let s = 1; s <= 5; s += 1) {
    await page.click(`[data-testid=tab-${s}]`);
    await jumpToEnd();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 0, `scene ${s} overflows by ${overflow}px`);
  }
  await page.click('[data-testid=tab-1]');
  await jumpToEnd();
  await shot('phone-scene-1');
});

/** Overlaps seen now: swimlane labels a marker sits on, stage nodes outside their panel. */
async function layoutProblems() {
  return page.evaluate(() => {
    const found = [];
    const meet = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
    const lane = document.querySelector('[data-testid=swimlane] svg');
    if (lane) {
      const shapes = [...lane.querySelectorAll('g.mark > circle, g.mark > path')].map((e) => e.getBBox());
      for (const t of lane.querySelectorAll('text.span-label, g.mark text')) {
        const b = t.getBBox();
        if (shapes.some((s) => meet(b, s))) found.push(`a marker covers the label "${t.textContent}"`);
      }
    }
    const stage = document.querySelector('[data-testid=stage] svg');
    const panels = [...stage.querySelectorAll('.panel-bg rect')].map((r) => r.getBBox());
    if (panels.length) {
      for (const g of stage.querySelectorAll('g.node')) {
        const box = g.querySelector('rect.box');
        const b = (box ?? g).getBBox();
        // a bordered box keeps 8 units clear of the panel's border (touching reads as cut off)
        const m = box ? 8 : 0;
        const inside = panels.some((p) => b.x >= p.x + m && b.y >= p.y + m && b.x + b.width <= p.x + p.width - m && b.y + b.height <= p.y + p.height - m);
        if (!inside) found.push(`node ${g.dataset.testid ?? g.dataset.client} is not inside its panel`);
      }
    }
    return found;
  });
}

test('layout: no swimlane marker covers a label and every node fits its panel (each step, 1280 and 390 px)', async () => {
  for (const size of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    await open(1, size);
    for (let s = 1; s <= 5; s += 1) {
      await page.click(`[data-testid=tab-${s}]`);
      const length = Number(await page.getAttribute('[data-testid=clock]', 'data-length'));
      for (let k = 1; k <= length; k += 1) {
        await scrubTo(k);
        assert.deepEqual(await layoutProblems(), [], `scene ${s}, step ${k}, ${size.width} px wide`);
      }
    }
  }
});

test('random interventions (seeded) in every scene: the page never errors and each scene still reaches its end', async () => {
  // mulberry32; the seed is printed on failure and replays exactly
  const seed = Number(process.env.DEMO_SEED ?? 20261129);
  let a = seed >>> 0;
  const rnd = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
  await open(1);
  try {
    for (let s = 1; s <= 5; s += 1) {
      await page.click(`[data-testid=tab-${s}]`);
      for (let round = 0; round < 3; round += 1) {
        const length = Number(await page.getAttribute('[data-testid=clock]', 'data-length'));
        await scrubTo(1 + Math.floor(rnd() * length));
        const clients = await page.locator('[data-client]').evaluateAll((gs) => gs.map((g) => g.dataset.client));
        await page.click(`[data-client="${pick(clients)}"]`);
        const actions = await page.locator('#menu [data-action]').evaluateAll((bs) => bs.map((b) => b.dataset.action));
        await page.click(`#menu [data-action="${pick(actions)}"]`);
      }
      await jumpToEnd();
      assert.equal(await page.getAttribute('body', 'data-done'), 'true', `scene ${s} reached its end`);
    }
  } catch (e) {
    e.message = `${e.message} (replay with DEMO_SEED=${seed})`;
    throw e;
  }
});

test('the "Try this" suggestions do what they say (scenes 2, 3, 5)', async () => {
  const kill = async (id) => {
    await page.click(`#stage [data-client="${id}"]`);
    await page.click('#menu [data-action=kill]');
  };
  // scene 3: a pause shorter than the timeout keeps N1 the leader; killing the promoted N2
  // hands the lease to N3 with the next epoch
  await open(3);
  await setSlider('pause', 6);
  await jumpToEnd();
  assert.match(await text('[data-testid=outcome]'), /One leader throughout · leader N1, epoch 7/);
  await setSlider('pause', 14);
  await scrubTo(15);
  await kill('N2');
  await jumpToEnd();
  assert.match(await text('[data-testid=outcome]'), /leader N3, epoch 9/);
  // scene 2: a killed holder's session expires and the ordered queue still wakes exactly one
  await page.click('[data-testid=tab-2]');
  await scrubTo(2);
  await kill('q0');
  await jumpToEnd();
  assert.match(await text('[data-testid=log]'), /Ordered queue\s+sessionExpired \{session: 1\}/);
  assert.equal(await page.getAttribute('[data-testid=counters-queue]', 'data-wasted'), '0');
  assert.equal(await page.getAttribute('[data-testid=counters-queue]', 'data-wakeups'), '6');
  // scene 5: a 60 s lease outlasts the 45 s pause — no expiry, no 412
  await page.click('[data-testid=tab-5]');
  await setSlider('ttl', 60);
  await jumpToEnd();
  assert.equal(await page.locator('[data-testid^=refused-]').count(), 0);
  assert.doesNotMatch(await text('[data-testid=log]'), /sessionExpired/);
});
