// Browser tests of the demo: a real Chromium (Debian's) driven by playwright-core, against
// the page served on 127.0.0.1 with the real wasm core. Run by scripts/test-demo.sh, which
// sets DEMO_URL. The page's ?test mode only removes animation delays; every assertion reads
// the DOM the learner sees. Screenshots of each scene's final frame go to web-demo/test-output/.

import { test, before, after, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { mkdirSync, copyFileSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { rng } from '../src/scenes/common.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const require = createRequire(path.join(root, 'tools', 'package.json'));
const { chromium } = require('playwright-core');

const BASE = process.env.DEMO_URL;
if (!BASE) throw new Error('DEMO_URL is not set: run scripts/test-demo.sh');
const OUT = path.join(root, 'web-demo', 'test-output');
mkdirSync(OUT, { recursive: true });

// The READMEs' pictures: taken on every run into OUT (gitignored), and over the tracked
// files in web-demo/ only on request (UPDATE_SCREENSHOTS=1), so that a run with another
// Chromium or other fonts leaves the checkout as it was.
async function readmeShot(name) {
  const file = path.join(OUT, name);
  await page.screenshot({ path: file });
  if (process.env.UPDATE_SCREENSHOTS === '1') copyFileSync(file, path.join(root, 'web-demo', name));
}

// scenes 1–5 (a paused holder, a wait queue, an election, replication, an HTTP object
// store), 6 (Redlock), 7 (lock-delay), 8 (permits that leak)
const SCENE_COUNT = 8;

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

/** Free play (story stops off) with the play button until the last step (waits on the page's state, never sleeps). */
async function playToEnd() {
  await page.locator('[data-testid=speed]').fill('3');
  if (await page.locator('[data-testid=story]').isChecked()) await page.keyboard.press('s');
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

/** The step of the recorded milestone with this label. */
async function stepOf(label) {
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  const m = ms.find((x) => x.label === label);
  assert.ok(m, `a milestone "${label}" (have: ${ms.map((x) => x.label).join(', ')})`);
  return m.step;
}

/** The timeline's step count, as the page says it: more than one, or a loop over the steps
 * would check nothing. */
async function stepsOf() {
  const n = Number(await page.getAttribute('[data-testid=clock]', 'data-length'));
  assert.ok(n > 1, `the timeline has ${n} steps`);
  return n;
}

/**
 * The timeline ends with the scene's own outcome: its last milestone is the outcome (not one
 * of yours), at the last step. A timeline the page cut short at its step cap, or whose script
 * stopped emitting, also ends with body[data-done] — but with no outcome milestone.
 */
async function assertOutcomeReached(where) {
  const [ms, length] = await page.evaluate(() => [window.fencelockDemo.milestones, window.fencelockDemo.length]);
  const last = ms.at(-1);
  assert.ok(last && last.n === null && !last.yours, `${where}: the last milestone is the outcome (it is ${JSON.stringify(last)})`);
  assert.equal(last.step, length, `${where}: the outcome is the last step`);
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
  assert.match(await text('[data-testid=outcome]'), /34 refused \(stale: 34 < 35\) · accepted: 34 → 35 → 35/);
  assert.doesNotMatch(await text('[data-testid=stage]'), /DATA CORRUPTED/);
  // the event log shows the core's real replies and events of the story, in order: A's
  // grant is the reply to its acquire, B's the event of the expiry that dequeued it
  const log = await text('[data-testid=log]');
  const order = ['reply: opened {session: 2, expiresAt: ', 'reply to session 2: granted {mode: "exclusive", token: 34}', 'session_expired {session: 2}', 'granted {session: 3, lock: "jobs/reindex", mode: "exclusive", token: 35}', 'refused (stale: 34 < 35)'];
  let at = -1;
  for (const s of order) {
    const i = log.indexOf(s);
    assert.ok(i > at, `log has "${s}" after the previous event`);
    at = i;
  }
  await shot('scene-1-fenced');
  // the README's pictures: the moment the storage refuses A's stale write (the second beat
  // of the payoff), at 1280 and at 390 px, viewport-sized as a learner sees them
  await page.keyboard.press('s'); // story mode back on, as a learner meets the page
  await page.locator('[data-testid=speed]').fill('0');
  await scrubTo(await stepOf('34 refused'));
  assert.match(await text('[data-testid=caption]'), /34 < 35: refused/);
  await page.evaluate(() => document.activeElement?.blur());
  await readmeShot('screenshot.png');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.evaluate(() => (window.scrollTo(0, 0), document.activeElement?.blur()));
  await readmeShot('screenshot-phone.png');
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
  const length = await stepsOf();
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

test('the event log prints each core answer under the kind the wasm binding returned, in every scene', async () => {
  // the reply kinds and event kinds of wasm/README.md (the core's Reply::kind() and
  // Output::kind()); a name the log made up (sessionOpened, sessionExpired, …) fails here
  const REPLY = ['opened', 'kept_alive', 'closed', 'granted', 'queued', 'busy', 'hold_ended', 'wait_ended', 'released', 'cancelled', 'ticked', 'watching', 'unwatched'];
  const EVENT = ['granted', 'released', 'session_expired', 'wait_timed_out', 'holder_changed'];
  const core = new RegExp(`^(?:reply(?: to session \\d+)?: (?:${REPLY.join('|')})|(?:${EVENT.join('|')})) \\{`);
  for (let s = 1; s <= SCENE_COUNT; s += 1) {
    await open(s);
    if (s === 5) await setSwitch('fencing', false);
    await jumpToEnd();
    // (scene 8's counter in Redis is a simulation, logged under "Redis (sim.)": not a core)
    const outs = await page.locator('[data-testid=log] li.out').evaluateAll((ls) => ls.filter((l) => !/\(sim\.\)/.test(l.querySelector('.src').textContent)).map((l) => l.querySelector('.txt').textContent));
    assert.ok(outs.length > 0, `scene ${s} logs the core's answers`);
    for (const l of outs) assert.match(l, core, `scene ${s}`);
    if (s === 1) assert.ok(outs.some((l) => /^reply: opened \{session: \d+, expiresAt: \d+\}$/.test(l)), 'an openSession answer is shown as the binding\'s {kind: "opened", session, expiresAt}');
    if (s === 5) {
      // the unfenced stale write's caption says what went wrong in the scene's own terms
      const landed = (await page.evaluate(() => window.fencelockDemo.milestones)).find((m) => m.label === '42 lands');
      assert.ok(landed, 'a milestone for the landed 42');
      await scrubTo(landed.step);
      const cap = await text('[data-testid=caption-text]');
      assert.match(cap, /replaced the report W2, the lock's holder, had begun/);
      assert.doesNotMatch(cap, /incident|\$2M/);
    }
  }
});

test('scene 1: a pause shorter than the session timeout changes the outcome — nothing goes wrong', async () => {
  await open(1);
  await setSwitch('fencing', false);
  await setSlider('pause', 5);
  await jumpToEnd();
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'ok');
  assert.doesNotMatch(await text('[data-testid=log]'), /session_expired/);
  assert.doesNotMatch(await text('[data-testid=stage]'), /DATA CORRUPTED/);
  assert.match(await text('[data-testid=caption]'), /No session expired: A was paused 5 s \(t=2–7\) — less than the 10 s session timeout/);
});

test('scene 1: a longer timeout only moves the window — expiry comes later, the stale write still lands', async () => {
  await open(1);
  await setSwitch('fencing', false);
  await setSlider('ttl', 30);
  await setSlider('pause', 45);
  await jumpToEnd();
  const log = await page.locator('[data-testid=log] li').allInnerTexts();
  const expiry = log.find((l) => l.includes('session_expired {session: 2}'));
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
  assert.match(await text('[data-testid=log]'), /session_expired \{session: 2\}/);
});

test('scene 1: keyboard — focus a client, Enter opens its menu, pause it, then resume it', async () => {
  await open(1);
  // Tab from A reaches B, the next client on the stage
  await page.focus('[data-testid=client-A]');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.client), 'B');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#menu:not([hidden])');
  await page.keyboard.press('Enter'); // first item: pause
  assert.equal(await page.getAttribute('[data-testid=client-B]', 'data-status'), 'paused');
  // focus came back to B: Enter opens its menu again, whose first item is now resume
  assert.equal(await page.evaluate(() => document.activeElement.dataset.client), 'B');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#menu:not([hidden])');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.action), 'resume');
  await page.keyboard.press('Enter');
  assert.equal(await page.getAttribute('[data-testid=client-B]', 'data-status'), 'running');
  await page.keyboard.press('3');
  assert.equal(await page.getAttribute('[data-testid=tab-3]', 'aria-pressed'), 'true');
});

test('scene 1: keyboard — the client menu is named by its title, and Tab out of it closes it', async () => {
  await open(1);
  const openOn = async (id) => {
    await page.focus(`[data-testid=client-${id}]`);
    await page.keyboard.press('Enter');
    await page.waitForSelector('#menu:not([hidden])');
  };
  await openOn('A');
  assert.equal(await page.getByRole('menu', { name: 'A at t=0' }).count(), 1, 'the menu\'s accessible name is its title');
  // the arrows move between its items; Tab leaves the menu: it closes and focus moves on
  // from A, to B
  await page.keyboard.press('ArrowDown');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.action), 'kill');
  await page.keyboard.press('Tab');
  assert.equal(await page.locator('#menu').isHidden(), true, 'Tab out of the menu closes it');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.client), 'B');
  // Shift+Tab out of B's menu: it closes and focus moves back, to A
  await openOn('B');
  await page.keyboard.press('Shift+Tab');
  assert.equal(await page.locator('#menu').isHidden(), true, 'Shift+Tab out of the menu closes it');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.client), 'A');
  // focus moved to another control by other means (a script, a screen reader) closes it too
  await openOn('A');
  await page.focus('[data-testid=step]');
  assert.equal(await page.locator('#menu').isHidden(), true, 'focus elsewhere closes the menu');
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
  const busyAfterStart = lines.filter((l) => !l.startsWith('t=0') && /Herd\s+reply to session \d+: busy \{/.test(l)).length;
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
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'ok');
  assert.equal(await page.locator('[data-testid=lost-redis]').count(), 0);
});

test('scene 4: a replica that applied nothing (lag 4) loses the sessions and A\'s grant — the captions say what the core says', async () => {
  await open(4);
  await setSlider('lag', 4);
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  await scrubTo(ms.find((m) => m.label === 'B asks').step);
  const asks = await text('[data-testid=caption-text]');
  assert.match(asks, /Left: B asks the promoted replica and is refused \(unknown_session\)/);
  assert.doesNotMatch(asks, /queued/);
  assert.match(await text('[data-testid=log]'), /refused acquire.*unknown_session/);
  await jumpToEnd();
  const end = await text('[data-testid=caption-text]');
  assert.match(end, /lost A's grant \(token 1\) in the failover: the promoted replica lists no such holder/);
  assert.doesNotMatch(end, /lost nothing that mattered/);
  // A was told "granted", and the promoted replica's core does not list that grant
  const o = await page.evaluate(() => window.fencelockDemo.outcome);
  assert.deepEqual(o.redis.holders, [{ name: 'A', token: 1 }]);
  assert.deepEqual(o.redis.forgotten, [{ name: 'A', token: 1 }]);
  assert.deepEqual(o.raft.forgotten, []);
  // the Outcome box and the State panel say so too: one told holder, and unsafe
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'corrupted');
  assert.match(await text('[data-testid=outcome]'), /^Unsafe Single Redis: 1 holder \(A·1\) — the promoted replica does not list A·1 \(grant lost\) · Consensus: 1 holder \(A·1\)$/);
  assert.equal(await page.getAttribute('[data-testid=holders-redis]', 'class'), 'bad');
  assert.match(await text('[data-testid=lost-redis]'), /the promoted replica does not list A·1 \(grant lost\)/);
  assert.equal(await page.getAttribute('[data-testid=holders-raft]', 'class'), 'good');
  assert.equal(await page.locator('[data-testid=lost-raft]').count(), 0);
});

test('scene 5: ShardPay — lease 30 s, 45 s pause, token 42 gets 412 Precondition Failed, 43 is the output', async () => {
  await open(5);
  await playToEnd();
  assert.match(await text('[data-testid=refused-42]'), /42 < 43/);
  assert.ok((await page.locator('[data-testid=accepted-43]').count()) >= 1);
  assert.match(await text('[data-testid=log]'), /with token 42 → 412 Precondition Failed \(stale: 42 < 43\)/);
  assert.match(await text('[data-testid=log]'), /session_expired/);
  const expiry = (await page.locator('[data-testid=log] li').allInnerTexts()).find((l) => l.includes('session_expired'));
  assert.match(expiry, /^t=40/, 'renewed at t=10, 30 s lease');
  await shot('scene-5');
});

test('phone width (390 px): no horizontal scrolling, every scene still renders', async () => {
  await open(1, { width: 390, height: 844 });
  for (let s = 1; s <= SCENE_COUNT; s += 1) {
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
// (No swimlane where `laned` says the scene draws one, or no panel where `panelled` says it
// draws them, is a problem too: the checks would otherwise pass on nothing when a selector
// stops matching.)
async function layoutProblems({ laned, panelled }) {
  return page.evaluate(({ laned, panelled }) => {
    const found = [];
    const meet = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
    const lane = document.querySelector('[data-testid=swimlane] svg');
    if (laned && !lane) found.push('no swimlane drawn');
    if (lane) {
      const shapes = [...lane.querySelectorAll('g.mark > circle, g.mark > path')].map((e) => e.getBBox());
      for (const t of lane.querySelectorAll('text.span-label, g.mark text')) {
        const b = t.getBBox();
        if (shapes.some((s) => meet(b, s))) found.push(`a marker covers the label "${t.textContent}"`);
      }
    }
    const stage = document.querySelector('[data-testid=stage] svg');
    const panels = [...stage.querySelectorAll('.panel-bg rect')].map((r) => r.getBBox());
    if (panelled && !panels.length) found.push('no panel drawn');
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
  }, { laned, panelled });
}

test('layout: no swimlane marker covers a label and every node fits its panel (each step, 1280 and 390 px)', async () => {
  for (const size of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    await open(1, size);
    for (let s = 1; s <= SCENE_COUNT; s += 1) {
      await page.click(`[data-testid=tab-${s}]`);
      const length = await stepsOf();
      for (let k = 1; k <= length; k += 1) {
        await scrubTo(k);
        assert.deepEqual(await layoutProblems({ laned: ![2, 4].includes(s), panelled: [4, 6, 8].includes(s) }), [], `scene ${s}, step ${k}, ${size.width} px wide`);
      }
    }
  }
});

test('random interventions (seeded) in every scene: the page never errors and each scene still reaches its outcome', async () => {
  // the seed is printed on failure and replays exactly
  const seed = Number(process.env.DEMO_SEED ?? 20261129);
  const rnd = rng(seed); // the page's own seeded generator (mulberry32)
  const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
  await open(1);
  try {
    for (let s = 1; s <= SCENE_COUNT; s += 1) {
      await page.click(`[data-testid=tab-${s}]`);
      for (let round = 0; round < 3; round += 1) {
        const length = await stepsOf();
        await scrubTo(1 + Math.floor(rnd() * length));
        const clients = await page.locator('[data-client]').evaluateAll((gs) => gs.map((g) => g.dataset.client));
        await page.click(`[data-client="${pick(clients)}"]`);
        const actions = await page.locator('#menu [data-action]').evaluateAll((bs) => bs.map((b) => b.dataset.action));
        await page.click(`#menu [data-action="${pick(actions)}"]`);
      }
      await jumpToEnd();
      await assertOutcomeReached(`scene ${s}`);
    }
  } catch (e) {
    e.message = `${e.message} (replay with DEMO_SEED=${seed})`;
    throw e;
  }
});

test('the "Try this" suggestions do what they say (scenes 1, 2, 3, 5)', async () => {
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
  assert.match(await text('[data-testid=caption]'), /No session expired \(N1 was paused 6 s, less than the 10 s session timeout\): one leader throughout/);
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
  assert.match(await text('[data-testid=log]'), /Ordered queue\s+session_expired \{session: 1\}/);
  assert.equal(await page.getAttribute('[data-testid=counters-queue]', 'data-wasted'), '0');
  assert.equal(await page.getAttribute('[data-testid=counters-queue]', 'data-wakeups'), '6');
  // scene 5: a 60 s lease outlasts the 45 s pause — no expiry, no 412
  await page.click('[data-testid=tab-5]');
  await setSlider('ttl', 60);
  await jumpToEnd();
  assert.equal(await page.locator('[data-testid^=refused-]').count(), 0);
  assert.doesNotMatch(await text('[data-testid=log]'), /session_expired/);
  // scene 5: W2 killed the moment it gets 43 — the store never sees 43 and W1's 42 gets through
  await setSlider('ttl', 30);
  await scrubTo(await stepOf('W2 gets 43'));
  await kill('W2');
  await jumpToEnd();
  assert.equal(await page.locator('[data-testid^=refused-]').count(), 0);
  assert.equal(await page.getAttribute('[data-testid=store]', 'data-verdict'), 'stale');
  // scene 1: B killed after its first write — 34 is refused all the same; killed at t=10 — 34 gets through
  await page.click('[data-testid=tab-1]');
  await scrubTo(await stepOf('B writes 35'));
  await kill('B');
  await jumpToEnd();
  assert.match(await text('[data-testid=refused-34]'), /34 < 35/);
  await page.keyboard.press('r');
  await scrubTo(await stepOf('B gets 35'));
  await kill('B');
  await jumpToEnd();
  assert.equal(await page.locator('[data-testid^=refused-]').count(), 0);
  assert.equal(await page.getAttribute('[data-testid=store]', 'data-verdict'), 'stale');
});

// ------------------------------------------------------------------ the guided story

/** What the learner sees now: caption, milestone, badges, store, outcome. */
async function seen() {
  return page.evaluate(() => {
    const q = (s) => document.querySelector(s);
    const badges = Object.fromEntries([...document.querySelectorAll('#stage [data-client]')].map((g) => [g.dataset.client, g.dataset.badge]));
    return {
      step: Number(q('[data-testid=clock]').dataset.step),
      milestone: q('[data-testid=caption]').dataset.milestone,
      caption: q('[data-testid=caption-text]').textContent,
      terms: [...document.querySelectorAll('[data-testid=terms] [data-term]')].map((p) => p.dataset.term),
      badges,
      clocks: Object.fromEntries([...document.querySelectorAll('#stage [data-client]')].map((g) => [g.dataset.client, g.querySelector('.lease')?.dataset.clock ?? null])),
      spots: [...document.querySelectorAll('#stage .spot')].map((r) => r.dataset.spot),
      flashLabels: [...document.querySelectorAll('#stage .flash-label')].map((t) => t.textContent),
      store: q('#stage [data-testid=store]')?.textContent.replace(/\s+/g, ' ') ?? '',
      service: q('#stage [data-testid=service]')?.textContent.replace(/\s+/g, ' ') ?? '',
      refused: [...document.querySelectorAll('[data-testid^=refused-]')].map((e) => e.textContent),
      highest: q('[data-testid=state-highest]')?.textContent ?? null,
      outcome: q('[data-testid=outcome]').hidden ? null : q('[data-testid=outcome]').textContent,
    };
  });
}

/** Plays the story: each press of space runs to the next milestone. Returns what was seen at each stop. */
async function walkStory() {
  assert.equal(await page.locator('[data-testid=story]').isChecked(), true, 'story mode is on when a scene opens');
  const stops = [await seen()];
  for (let i = 0; i < 40 && (await page.getAttribute('body', 'data-at-end')) !== 'true'; i += 1) {
    await page.evaluate(() => document.activeElement?.blur()); // space on a focused client opens its menu
    await page.keyboard.press('Space');
    await page.waitForSelector('body[data-playing="false"]');
    stops.push(await seen());
  }
  assert.equal(await page.getAttribute('body', 'data-at-end'), 'true');
  for (const st of stops) claimsHold(st);
  return stops;
}

/**
 * The claims any caption makes that the picture must bear out: "X is granted token N" (X's
 * badge holds N), "X leads with epoch N" (the service lists X with N), "a < b" (a refused
 * chip a < b), "records N as the highest" (the storage's highest is N).
 */
function claimsHold(st) {
  const where = `step ${st.step}: "${st.caption}"`;
  assert.ok(st.milestone, `${where}: a story stop is a milestone`);
  for (const [, who, n] of st.caption.matchAll(/\b(\w+) is granted (?:token |fenceToken )?(\d+)/g)) assert.equal(st.badges[who], `holds ${n}`, where);
  for (const [, who, n] of st.caption.matchAll(/\b([A-Z]\d+) leads with epoch (\d+)/g)) assert.match(st.service, new RegExp(`holder ${who} · token ${n}`), where);
  for (const [, a, b] of st.caption.matchAll(/\b(\d+) < (\d+)/g)) if (!/epoch n once/.test(st.caption) || a !== 'n') assert.ok(st.refused.includes(`${a} < ${b}`), `${where}: refused chips ${st.refused}`);
  for (const [, n] of st.caption.matchAll(/records (?:epoch )?(\d+) as the highest/g)) assert.equal(st.highest, n, where);
}

test('story, scene 1: playback stops at each milestone and each caption matches the picture', async () => {
  await open(1);
  const stops = await walkStory();
  // every stop is a milestone, numbered in order, the last one the outcome
  assert.deepEqual(stops.map((s) => s.milestone), ['1', '2', '3', '4', '5', '6', '7', 'outcome']);
  const [acq, write34, paused, granted35, write35, sends, refused, end] = stops;
  assert.match(acq.caption, /fencing token 34/);
  assert.equal(acq.badges.A, 'holds 34');
  assert.equal(acq.badges.B, 'queued #1');
  assert.match(acq.service, /holder A · token 34/);
  assert.ok(acq.terms.includes('fencing token'), 'the term is defined where it is first used');
  assert.match(write34.caption, /records 34 as the highest/);
  assert.equal(write34.highest, '34');
  assert.ok(!write34.terms.includes('fencing token'), 'defined once');
  assert.match(paused.caption, /A hits a 25-second stop-the-world/);
  assert.equal(paused.badges.A, 'GC pause · holds 34');
  assert.equal(paused.clocks.A, 'stopped', "a frozen process's own clock is drawn stopped");
  assert.deepEqual(paused.spots, ['A']);
  assert.match(granted35.caption, /B is granted token 35.*A cannot know: it still believes it holds 34/);
  assert.equal(granted35.badges.B, 'holds 35');
  assert.equal(granted35.badges.A, 'GC pause · believes 34');
  assert.match(write35.caption, /B writes with token 35.*records 35/);
  assert.equal(write35.highest, '35');
  // the payoff, beat 1: A wakes still believing 34 and sends; its renewal thread's overdue
  // keep-alive, sent as it wakes, is refused: A knows it lost the lock, after the write left;
  // nothing refused by the storage yet
  assert.match(sends.caption, /A wakes\. It still believes it holds token 34.*sends its write with 34\..*Now A knows it lost the lock — but the write has already left/);
  assert.equal(sends.badges.A, 'lost the lock');
  assert.deepEqual(sends.refused, []);
  assert.ok(sends.flashLabels.includes('write 34'), 'the write is on its way, labelled');
  assert.deepEqual(sends.spots, ['A']);
  // beat 2: 34 < 35, refused; knowing did not call the write back
  assert.match(refused.caption, /^34 < 35: refused.*A had learnt it lost the lock after sending — too late/);
  assert.deepEqual(refused.refused, ['34 < 35']);
  assert.equal(refused.badges.A, 'lost the lock');
  assert.ok(refused.spots.includes('store'));
  assert.match(end.caption, /^Outcome: A's write with token 34 was refused: the storage had already seen 35 \(34 < 35\)/);
  assert.match(end.outcome, /Fenced/);
  // after the story: free play
  assert.equal(await page.locator('[data-testid=story]').isChecked(), false);
  assert.equal(await page.locator('[data-testid=free-play]').count(), 1);
  // the milestones are numbered on the time axis
  assert.equal(await page.locator('#swimlane [data-testid^=ms-]').count(), 8);
});

test('story, scene 1: killing B before its first write — the ending says the storage never saw 35', async () => {
  await open(1);
  const stepB = await stepOf('B gets 35');
  await scrubTo(stepB);
  await page.click('[data-testid=client-B]');
  await page.click('[data-testid=menu-kill]');
  const stops = await walkStory();
  const end = stops.at(-1);
  assert.equal(await page.locator('[data-testid^=refused-]').count(), 0, 'nothing was refused');
  assert.match(end.caption, /A's write with 34 was accepted although the lock service had given the lock to B \(token 35\): the storage had seen no token above 34 — 35 never reached it/);
  assert.doesNotMatch(end.caption, /corrupted|Turn on/);
  assert.equal(await page.getAttribute('[data-testid=store]', 'data-verdict'), 'stale');
  assert.doesNotMatch(await text('[data-testid=stage]'), /DATA CORRUPTED/);
  assert.match(await text('[data-testid=stage]'), /STALE WRITE LANDED/);
  // the stop where the write lands says why, in the present
  const landed = stops.find((s) => /^Accepted — yet A no longer holds the lock/.test(s.caption));
  assert.ok(landed, 'a stop explains the accepted stale write');
});

test('story, scene 1: resuming A early — the ending gives the pause A really had', async () => {
  await open(1);
  await scrubTo(6); // t=5, A paused at t=2
  await page.click('[data-testid=client-A]');
  await page.click('[data-testid=menu-resume]');
  await jumpToEnd();
  const cap = await text('[data-testid=caption]');
  assert.doesNotMatch(await text('[data-testid=log]'), /session_expired/);
  assert.match(cap, /No session expired: A was paused 3 s \(t=2–5\) — less than the 10 s session timeout/);
  assert.doesNotMatch(cap, /25 s/);
});

test('story, scene 2: a release with an empty queue says nobody is woken', async () => {
  await open(2);
  const stops = await walkStory();
  assert.equal(stops[0].milestone, '1');
  assert.match(stops[1].caption, /Left: H releases; the core grants the lock to exactly one waiter, the head of its wait queue: C1 \(token 2\)/);
  assert.match(stops[1].caption, /C6 wins; the core answers "busy" to the other 5/);
  const captions = (await page.evaluate(() => window.fencelockDemo.milestones)).length;
  assert.ok(captions >= 3);
  for (const s of stops) assert.doesNotMatch(s.caption, /exactly one waiter, nobody/);
  assert.match(stops.at(-1).caption, /6 wake-ups, 0 wasted.*21 wake-ups, 15 of them wasted/);
});

test('story, scenes 2 and 4: every stop\'s caption matches the picture', async () => {
  // each check below runs only on a caption that makes its claim: the counts say that every
  // claim was met at least once, so a reworded caption cannot leave a check silently unused
  const fired = {};
  const check = (name) => (fired[name] = (fired[name] ?? 0) + 1);
  await open(2);
  for (const st of await walkStory()) {
    const m = st.caption.match(/head of its wait queue: (\w+) \(token (\d+)\)/);
    if (m) {
      const id = Object.entries(await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#stage [data-client]')].map((g) => [g.dataset.client, g.querySelector('.name').textContent])))).find(([k, v]) => k.startsWith('q') && v === m[1])?.[0];
      assert.equal(st.badges[id], `holds ${m[2]}`, st.caption);
      check('2: head of the queue granted');
    }
    const h = st.caption.match(/(\w+) wins; the core answers "busy" to the other (\d+)/);
    if (h) {
      assert.ok(Object.entries(st.badges).some(([k, v]) => k.startsWith('h') && v.startsWith('holds')), st.caption);
      check('2: the herd\'s winner holds');
    }
  }
  await open(4);
  const stops = await walkStory();
  const alive = async (id) => page.getAttribute(`[data-testid=replica-${id}]`, 'data-alive');
  for (const st of stops) {
    await scrubTo(st.step);
    if (/only now is A told: granted, token (\d+)/.test(st.caption)) {
      assert.equal(st.badges.A2, `holds ${st.caption.match(/token (\d+)/)[1]}`);
      check('4: A told granted');
    }
    if (/Left: the primary dies/.test(st.caption)) {
      assert.equal(await alive('P'), 'false');
      check('4: the primary dies');
    }
    if (/the leader N1 dies/.test(st.caption)) {
      assert.equal(await alive('N1'), 'false');
      check('4: N1 dies');
    }
    if (/Right: (N\d) is elected/.test(st.caption)) {
      assert.match(await page.locator(`[data-testid=replica-${st.caption.match(/Right: (N\d) is elected/)[1]}]`).textContent(), /★ leader/);
      check('4: a leader is elected');
    }
    if (/B acquires the "same" lock .* granted \(token (\d+)\)/.test(st.caption)) {
      assert.equal(st.badges.B1, `holds ${st.caption.match(/granted \(token (\d+)\)/)[1]}`);
      check('4: B granted on the replica');
    }
    if (/two holders/.test(st.caption)) {
      assert.equal(await text('[data-testid=holders-redis]'), '2');
      check('4: two holders');
    }
    if (/queued B \(position (\d+)\)/.test(st.caption)) {
      assert.equal(st.badges.B2, `queued #${st.caption.match(/position (\d+)/)[1]}`);
      check('4: B queued');
    }
  }
  assert.match(stops.at(-1).caption, /single Redis: 2 holders \(A with 1, B with 1\)\. Consensus: 1 holder \(A with 1\), B waiting/);
  const names = ['2: head of the queue granted', '2: the herd\'s winner holds', '4: A told granted', '4: the primary dies', '4: N1 dies', '4: a leader is elected', '4: B granted on the replica', '4: two holders', '4: B queued'];
  assert.deepEqual(names.filter((n) => !fired[n]), [], `every check ran at least once (ran: ${JSON.stringify(fired)})`);
});

test('story, scene 3: the old leader wakes and sends epoch 7, then it bounces', async () => {
  await open(3);
  const stops = await walkStory();
  const byLabel = Object.fromEntries(stops.map((s) => [s.caption.slice(0, 30), s]));
  const sends = stops.find((s) => /^N1 wakes\. It still believes it leads with epoch 7/.test(s.caption));
  assert.ok(sends, `a stop for the send (${Object.keys(byLabel).join(' | ')})`);
  assert.deepEqual(sends.refused, []);
  assert.ok(sends.flashLabels.includes('epoch 7'));
  // its overdue keep-alive, sent as it wakes, is refused: N1 knows before the DB answers, and
  // the action it sent reaches the DB all the same
  assert.match(sends.caption, /Its overdue keep-alive, sent as it wakes, is refused/);
  assert.equal(sends.badges.N1, 'lost the lock');
  const bounced = stops[stops.indexOf(sends) + 1];
  assert.match(bounced.caption, /^7 < 8: bounced.*N1 had learnt it was no longer leader after it sent the action — too late to call it back/);
  assert.deepEqual(bounced.refused, ['7 < 8']);
  assert.ok(stops[0].terms.includes('epoch'));
});

test('story, scene 4: replica cells tell the truth — N3 applied 2 of 3, a dead primary keeps only what it had', async () => {
  await open(4);
  await scrubTo(4); // t=3: the primary dies, N3 lags
  const cells = (id) => page.locator(`[data-testid=replica-${id}] [data-cell]`).evaluateAll((gs) => gs.map((g) => g.dataset.cell));
  assert.match(await page.locator('[data-testid=replica-N3]').textContent(), /applied 2\/3/);
  assert.deepEqual(await cells('N3'), ['acked', 'acked', 'missing']);
  assert.deepEqual(await cells('N1'), ['acked', 'acked', 'acked']);
  await jumpToEnd();
  // the primary died at t=3 with 3 entries; B's acquire came later and is not in its log
  assert.match(await page.locator('[data-testid=replica-P]').textContent(), /had 3 entries/);
  assert.equal((await cells('P')).length, 3);
  // the promoted replica kept the 2 entries it had applied; B's acquire is its third
  assert.deepEqual(await cells('R'), ['applied', 'applied', 'applied']);
});

test('story, scene 5: the 412 comes in two beats — W1 sends 42, then the store refuses it', async () => {
  await open(5);
  const stops = await walkStory();
  const i = stops.findIndex((s) => /^W1 wakes\. It still believes it holds fenceToken 42/.test(s.caption));
  assert.ok(i > 0);
  assert.match(stops[i].caption, /Its renewal thread wakes too and sends the overdue keep-alive: refused/);
  assert.equal(stops[i].badges.W1, 'lost the lock', 'the refused keep-alive told W1, after the PUT had gone');
  assert.match(stops[i + 1].caption, /^42 < 43: 412 Precondition Failed.*Its renewal thread reported the lost lease as W1 woke, but the PUT went first/);
  assert.match(stops.at(-1).caption, /W1's write with fenceToken 42 got 412 Precondition Failed: the object store had already seen 43/);
});

test('interventions survive the switch and the sliders, and a dropped one says so', async () => {
  await open(1);
  await scrubTo(await stepOf('B gets 35'));
  await page.click('[data-testid=client-B]');
  await page.click('[data-testid=menu-kill]');
  assert.match(await text('[data-testid=interventions]'), /kill B at t=10/);
  await page.keyboard.press('f'); // fencing off: rebuilt, B killed again at t=10
  assert.match(await text('[data-testid=interventions]'), /kill B at t=10/);
  await jumpToEnd();
  assert.equal(await page.getAttribute('[data-testid=client-B]', 'data-status'), 'dead');
  await setSlider('ttl', 12); // A now expires at t=12: B is not granted before t=12, still alive at t=10 → killed
  assert.match(await text('[data-testid=interventions]'), /kill B at t=10/);
  // resume A at t=20, then make the pause short: A is no longer paused at t=20 — dropped, visibly
  await setSlider('ttl', 10);
  await scrubTo(21);
  await page.click('[data-testid=client-A]');
  await page.click('[data-testid=menu-resume]');
  assert.match(await text('[data-testid=interventions]'), /resume A at t=20/);
  await setSlider('pause', 15); // A now wakes by itself at t=17 and, with B dead, the scene ends sooner
  assert.match(await text('[data-testid=iv-dropped]'), /resume A at t=20 dropped: (A is not paused at t=20|the scene now ends at t=\d+)/);
  assert.deepEqual(await page.locator('[data-testid=iv]').allTextContents(), ['kill B at t=10']);
  assert.match(await text('[data-testid=interventions]'), /kill B at t=10/);
  // another scene and back: still there
  await page.keyboard.press('2');
  await page.keyboard.press('1');
  assert.match(await text('[data-testid=interventions]'), /kill B at t=10/);
  // reset drops them, and says so
  await page.keyboard.press('r');
  assert.match(await text('[data-testid=iv-dropped]'), /reset: 1 intervention removed/);
});

test('keys and links: Home/End do not scroll the page, a step closes a stale menu, the hash wins', async () => {
  await open(1);
  await page.evaluate(() => window.scrollTo(0, 300));
  const y = await page.evaluate(() => window.scrollY);
  await page.keyboard.press('End');
  assert.equal(await page.evaluate(() => window.scrollY), y);
  assert.equal(await page.getAttribute('body', 'data-at-end'), 'true');
  await page.keyboard.press('Home');
  assert.equal(await page.evaluate(() => window.scrollY), y);
  await page.focus('[data-testid=client-A]');
  await page.keyboard.press('Enter');
  assert.match(await text('#menu'), /A at t=0/);
  await page.keyboard.press('Escape');
  await page.click('[data-testid=client-A]');
  // the step from the keyboard, focus inside the menu (a click elsewhere would close it anyway)
  assert.equal(await page.evaluate(() => !!document.activeElement.closest('#menu')), true);
  await page.keyboard.press('ArrowRight');
  assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), '2');
  assert.equal(await page.locator('#menu').isHidden(), true, 'the menu (which named t=0) closed when time moved');
  await page.goto(`${BASE}?test&scene=5#scene-2`);
  await page.waitForSelector('body[data-ready="1"]');
  assert.equal(await page.getAttribute('[data-testid=tab-2]', 'aria-pressed'), 'true');
});

test('layout: a caption box that runs past its edge says so, and every timeline label is whole (1280 and 390 px)', async () => {
  for (const size of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    // scene 1, milestone ①: the caption and three term definitions are longer than the box
    await open(1, size);
    const dock = page.locator('[data-testid=dock]');
    const more = page.locator('[data-testid=dock-more]');
    assert.ok(await dock.evaluate((d) => d.scrollHeight > d.clientHeight + 2), `${size.width}: the text overflows the box`);
    assert.ok(await more.isVisible(), `${size.width}: the "more below" bar shows`);
    // the bar sits inside the box, on its bottom edge, where the eye stops
    const [d, m] = [await dock.boundingBox(), await more.boundingBox()];
    assert.ok(m.y >= d.y && m.y + m.height <= d.y + d.height + 1 && d.y + d.height - (m.y + m.height) < 4, `${size.width}: bar ${m.y}–${m.y + m.height}, box ${d.y}–${d.y + d.height}`);
    // clicking it scrolls; at the end of the text it goes away
    await more.click();
    assert.ok((await dock.evaluate((el) => el.scrollTop)) > 0, `${size.width}: a click scrolls the box`);
    await dock.evaluate((el) => { el.scrollTop = el.scrollHeight; });
    await page.waitForFunction(() => document.querySelector('[data-testid=dock-more]').hidden);
    // a new caption starts at its top
    await page.keyboard.press('Space');
    await page.waitForFunction(() => document.querySelector('[data-testid=caption]').dataset.milestone === '2');
    assert.equal(await dock.evaluate((el) => el.scrollTop), 0, `${size.width}: a new caption is shown from its start`);
    assert.equal(await more.isVisible(), await dock.evaluate((el) => el.scrollHeight > el.clientHeight + 2), `${size.width}: the bar shows exactly when there is more`);
    // every lane label of every scene's timeline lies inside the drawing ("Lock service", not "ock service")
    for (let s = 1; s <= SCENE_COUNT; s += 1) {
      await page.click(`[data-testid=tab-${s}]`);
      const cut = await page.locator('.swimlane .lane-label').evaluateAll((ls) => ls.filter((l) => {
        const b = l.getBBox();
        return b.x < 0 || b.x + b.width > l.ownerSVGElement.viewBox.baseVal.width;
      }).map((l) => `${l.textContent} (x=${l.getBBox().x.toFixed(1)})`));
      assert.deepEqual(cut, [], `${size.width}, scene ${s}: lane labels cut at the edge`);
    }
  }
});

test('layout: the caption is on screen with the stage at every milestone and no control covers it (390×844), and the controls never move or cover the stage (1280×800)', async () => {
  for (let s = 1; s <= SCENE_COUNT; s += 1) {
    await open(s, { width: 390, height: 844 });
    const steps = (await page.evaluate(() => window.fencelockDemo.milestones)).map((m) => m.step);
    for (const k of steps) {
      await scrubTo(k);
      await page.evaluate(() => window.scrollTo(0, 0));
      const r = await page.evaluate(() => {
        const b = (s) => document.querySelector(s).getBoundingClientRect();
        // every control (transport, header, the scene's own controls) and the narrative text
        const controls = [...document.querySelectorAll('.transport, .top, #controls, #menu:not([hidden])')].map((e) => ({ what: e.className || e.id, box: e.getBoundingClientRect() }));
        return { stage: b('[data-testid=stage]'), dock: b('[data-testid=dock]'), h: innerHeight, controls };
      });
      assert.ok(r.stage.top >= 0 && r.dock.bottom <= r.h, `scene ${s}, step ${k}: stage ${r.stage.top}–${r.stage.bottom}, caption ${r.dock.top}–${r.dock.bottom}, screen ${r.h}`);
      for (const c of r.controls) {
        const meet = c.box.left < r.dock.right && r.dock.left < c.box.right && c.box.top < r.dock.bottom && r.dock.top < c.box.bottom;
        assert.ok(!meet, `scene ${s}, step ${k}: ${c.what} covers the caption`);
      }
    }
  }
  await open(1, { width: 1280, height: 800 });
  assert.equal(await page.$eval('.transport', (e) => getComputedStyle(e).position), 'static', 'the bar is in the flow: it covers nothing');
  const length = await stepsOf();
  // scrolled so that the whole timeline shows under the stage, the bar still in view
  await page.evaluate(() => window.scrollTo(0, 100));
  const first = await page.$eval('[data-testid=step]', (e) => JSON.stringify(e.getBoundingClientRect()));
  for (let k = 2; k <= length; k += 1) {
    await page.click('[data-testid=step]');
    assert.equal(await page.$eval('[data-testid=step]', (e) => JSON.stringify(e.getBoundingClientRect())), first, `step ${k}: the Step button stays under the pointer`);
  }
});

/** Stage texts that overlap another stage text (bounding boxes in the SVG's units). */
async function stageOverlaps() {
  return page.evaluate(() => {
    const svg = document.querySelector('[data-testid=stage] svg');
    const texts = [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim() && t.getAttribute('x') !== '-999');
    const boxes = texts.map((t) => ({ t: t.textContent, b: t.getBBox() }));
    const meet = (a, b) => a.x + 0.5 < b.x + b.width && b.x + 0.5 < a.x + a.width && a.y + 0.5 < b.y + b.height && b.y + 0.5 < a.y + a.height;
    const found = [];
    for (let i = 0; i < boxes.length; i += 1) for (let j = i + 1; j < boxes.length; j += 1) if (meet(boxes[i].b, boxes[j].b)) found.push(`"${boxes[i].t}" overlaps "${boxes[j].t}"`);
    const W = svg.viewBox.baseVal.width;
    for (const { t, b } of boxes) if (b.x < 0 || b.x + b.width > W) found.push(`"${t}" runs off the stage`);
    // the small boxes (Redlock's nodes, a phone's compact service and storage) hold their text
    for (const g of svg.querySelectorAll('.rlnode, .node.compact')) {
      const r = g.querySelector('rect.box').getBBox();
      for (const t of g.querySelectorAll('text')) {
        const b = t.getBBox();
        if (t.textContent.trim() && (b.x < r.x || b.x + b.width > r.x + r.width + 0.5)) found.push(`"${t.textContent}" runs out of its box`);
      }
    }
    return found;
  });
}

/** The smallest rendered font size of the drawings' text, in CSS pixels. */
async function smallestDrawingText() {
  return page.evaluate(() => {
    let min = Infinity;
    let which = '';
    for (const svg of document.querySelectorAll('[data-testid=stage] svg, [data-testid=swimlane] svg')) {
      const scale = svg.getScreenCTM().a;
      for (const t of svg.querySelectorAll('text')) {
        if (!t.textContent.trim() || t.closest('[hidden]')) continue;
        const px = parseFloat(getComputedStyle(t).fontSize) * scale;
        if (px < min) (min = px), (which = t.textContent);
      }
    }
    return { min, which };
  });
}

test('layout: no two stage labels overlap, and the drawings keep text legible (every step, 1280 and 390 px)', async () => {
  for (const size of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    await open(1, size);
    for (let s = 1; s <= SCENE_COUNT; s += 1) {
      await page.click(`[data-testid=tab-${s}]`);
      const length = await stepsOf();
      for (let k = 1; k <= length; k += 1) {
        await scrubTo(k);
        assert.deepEqual(await stageOverlaps(), [], `scene ${s}, step ${k}, ${size.width} px wide`);
        const small = await smallestDrawingText();
        assert.ok(small.min >= 12 - 0.01, `scene ${s}, step ${k}, ${size.width} px: "${small.which}" is drawn at ${small.min.toFixed(1)} px`);
      }
    }
  }
});

// WCAG 2 relative luminance and contrast ratio
const CONTRAST_FN = `
  const rgb = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null; const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return { r: p[0], g: p[1], b: p[2], a: p[3] ?? 1 }; };
  const lum = ({ r, g, b }) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }; return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const over = (top, under) => ({ r: top.r * top.a + under.r * (1 - top.a), g: top.g * top.a + under.g * (1 - top.a), b: top.b * top.a + under.b * (1 - top.a), a: 1 });
  const ratio = (x, y) => { const [a, b] = [lum(x), lum(y)].sort((p, q) => q - p); return (a + 0.05) / (b + 0.05); };
`;

test('contrast: the palette pairs and every text drawn in each scene meet WCAG AA', async () => {
  await open(1);
  // the palette: each text colour on each background it is used on
  const palette = await page.evaluate(`(() => { ${CONTRAST_FN}
    const probe = document.createElement('span'); document.body.append(probe);
    const colour = (v) => { probe.style.color = v; return rgb(getComputedStyle(probe).color); };
    const css = (name) => colour(getComputedStyle(document.documentElement).getPropertyValue(name).trim());
    const pairs = [['--ink', '--panel'], ['--muted', '--panel'], ['--muted', '--bg'], ['--good', '--panel'], ['--good', '--good-bg'], ['--bad', '--panel'], ['--bad', '--bad-bg'],
      ['--warn', '--panel'], ['--warn', '--warn-bg'], ['--blue', '--panel'], ['--blue', '--blue-bg'], ['--ink', '--bg']];
    const out = pairs.map(([f, b]) => [f + ' on ' + b, ratio(css(f), css(b))]);
    probe.remove();
    return out;
  })()`);
  for (const [pair, r] of palette) assert.ok(r >= 4.5, `${pair}: ${r.toFixed(2)}:1`);
  // every text on the page, in every scene's end frame and at its milestones: colour on what is
  // really behind it (the halo it is drawn with, else the shape or box under its centre)
  for (let s = 1; s <= SCENE_COUNT; s += 1) {
    await page.click(`[data-testid=tab-${s}]`);
    const steps = [...new Set([...(await page.evaluate(() => window.fencelockDemo.milestones)).map((m) => m.step)])];
    for (const k of steps) {
      await scrubTo(k);
      const bad = await page.evaluate(`(() => { ${CONTRAST_FN}
        const bgOf = (el) => { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c && c.a > 0) return c.a < 1 ? over(c, { r: 255, g: 255, b: 255, a: 1 }) : c; } return { r: 255, g: 255, b: 255, a: 1 }; };
        const found = [];
        for (const t of document.querySelectorAll('svg text, svg tspan')) {
          if (!t.textContent.trim() || t.getAttribute('x') === '-999') continue;
          if (t.tagName === 'text' && t.querySelector('tspan') && !t.childNodes[0]?.textContent.trim()) continue;
          const st = getComputedStyle(t);
          const fg = rgb(st.fill);
          if (!fg) continue;
          let bg = null;
          const halo = rgb(st.stroke);
          if (st.paintOrder.startsWith('stroke') && halo && halo.a > 0 && parseFloat(st.strokeWidth) >= 3) bg = halo;
          if (!bg) {
            const r = t.getBoundingClientRect();
            const under = document.elementsFromPoint(r.left + r.width / 2, r.top + r.height / 2);
            for (const e of under) {
              if (e === t || t.contains(e) || e.closest('text')) continue;
              if (e instanceof SVGGraphicsElement && !(e instanceof SVGSVGElement)) {
                const f = rgb(getComputedStyle(e).fill);
                if (f && f.a > 0) { const o = parseFloat(getComputedStyle(e).fillOpacity); bg = o < 1 ? over({ ...f, a: o }, bgOf(e.ownerSVGElement)) : f; break; }
                continue;
              }
              bg = bgOf(e); break;
            }
          }
          bg ??= { r: 255, g: 255, b: 255, a: 1 };
          const size = parseFloat(st.fontSize);
          const large = size >= 24 || (size >= 18.66 && Number(st.fontWeight) >= 700);
          const r = ratio(fg, bg);
          if (r < (large ? 3 : 4.5)) found.push('"' + t.textContent.slice(0, 40) + '" ' + st.fill + ' on rgb(' + [bg.r, bg.g, bg.b].map(Math.round) + '): ' + r.toFixed(2));
        }
        for (const el of document.querySelectorAll('.dock, .dock *, .kv th, .kv td, .kv td *, .outcome, .log li span, .interventions, .interventions *, .controls label, .try li, .hint, .lede, .panel h3, .transport, .transport *')) {
          if (!el.childNodes.length || ![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
          const st = getComputedStyle(el);
          if (st.visibility === 'hidden' || el.closest('[hidden]')) continue;
          const fg = rgb(st.color);
          const bg = bgOf(el);
          const size = parseFloat(st.fontSize);
          const large = size >= 24 || (size >= 18.66 && Number(st.fontWeight) >= 700);
          const r = ratio(fg, bg);
          if (r < (large ? 3 : 4.5)) found.push('"' + el.textContent.trim().slice(0, 40) + '" ' + st.color + ' on rgb(' + [bg.r, bg.g, bg.b].map(Math.round) + '): ' + r.toFixed(2));
        }
        return [...new Set(found)];
      })()`);
      assert.deepEqual(bad, [], `scene ${s}, step ${k}`);
    }
  }
});

test('random interventions (seeded): every ending agrees with the recorded outputs and the storage\'s decisions', async () => {
  const seed = Number(process.env.DEMO_SEED ?? 20261201);
  const rnd = rng(seed); // the page's own seeded generator (mulberry32)
  const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
  await open(1);
  const TRIALS = 36;
  let checked = 0;
  try {
    for (let trial = 0; trial < TRIALS; trial += 1) {
      const s = pick([1, 3, 5, 7, 1, 3, 5, 7, 2, 4, 6, 8]);
      await page.click(`[data-testid=tab-${s}]`);
      await page.keyboard.press('r');
      if ([1, 3, 5, 6].includes(s) && rnd() < 0.4) await page.keyboard.press('f');
      for (let round = 0, n = 1 + Math.floor(rnd() * 3); round < n; round += 1) {
        const length = await stepsOf();
        await scrubTo(1 + Math.floor(rnd() * length));
        const clients = await page.locator('[data-client]').evaluateAll((gs) => gs.map((g) => g.dataset.client));
        await page.click(`[data-client="${pick(clients)}"]`);
        const actions = await page.locator('#menu [data-action]').evaluateAll((bs) => bs.map((b) => b.dataset.action));
        await page.click(`#menu [data-action="${pick(actions)}"]`);
      }
      await jumpToEnd();
      const where = `trial ${trial}, scene ${s}`;
      await assertOutcomeReached(where);
      const cap = await text('[data-testid=caption-text]');
      const log = await page.locator('[data-testid=log] li').allInnerTexts();
      const logText = log.join('\n');
      // "X was paused N s (t=a–b)": the log's pause and resume of X
      const pausesHold = () => {
        for (const m of cap.matchAll(/(\w+) was paused (\d+) s(?: \(t=(\d+)–(\d+)\))?/g)) {
          const [, who, secs, from, to] = m;
          const pauses = log.filter((l) => new RegExp(`^t=\\d+\\s+${who}\\s+${who} (enters a stop-the-world GC pause|paused \\(by you\\))`).test(l));
          const p = from ? pauses.find((l) => new RegExp(`^t=${from}\\s`).test(l)) : pauses[0];
          assert.ok(p, `${where}: the log has ${who}'s pause${from ? ` at t=${from}` : ''}`);
          const t0 = Number(p.match(/^t=(\d+)/)[1]);
          const r = log.find((l) => new RegExp(`^t=(\\d+)\\s+${who}\\s+${who} resumes`).test(l) && Number(l.match(/^t=(\d+)/)[1]) >= t0);
          const t1 = r ? Number(r.match(/^t=(\d+)/)[1]) : null;
          if (from) assert.deepEqual([Number(from), Number(to)], [t0, t1 ?? Number(to)], `${where}: ${m[0]}`);
          if (t1 != null) assert.equal(Number(secs), t1 - t0, `${where}: ${m[0]}`);
        }
      };
      if (s === 1 || s === 3 || s === 5) {
        const rows = Object.values(await page.evaluate(() => window.fencelockDemo.rows))[0];
        const fencing = await page.locator('input[role=switch]').isChecked();
        const refused = rows.filter((r) => !r.accepted);
        const stale = rows.filter((r) => r.accepted && r.stale);
        for (const r of refused) assert.ok(cap.includes(`(${r.token} < ${r.highest})`), `${where}: the ending names the refusal ${r.token} < ${r.highest}: ${cap}`);
        if (!refused.length) assert.doesNotMatch(cap, /refused|bounced|412/, `${where}: nothing was refused: ${cap}`);
        for (const r of stale) assert.match(cap, new RegExp(`with (epoch )?${r.token} (landed|was accepted)`), `${where}: the ending names the stale ${r.token}: ${cap}`);
        if (!stale.length) assert.doesNotMatch(cap, /landed|was accepted although|corrupted|split brain/i, `${where}: no stale write landed: ${cap}`);
        const verdict = await page.getAttribute('[data-testid=store]', 'data-verdict');
        assert.equal(/data is corrupted/.test(cap), verdict === 'corrupted', `${where}: "corrupted" iff the data mixes a stale writer's with another's: ${cap}`);
        if (fencing) assert.doesNotMatch(cap, /Turn on/, `${where}: the switch is on: ${cap}`);
        const expired = /session_expired/.test(logText);
        if (/No session expired/.test(cap)) assert.ok(!expired, `${where}: the log has an expiry: ${cap}`);
        if (!expired && !refused.length && !stale.length) assert.match(cap, /No session expired/, `${where}: ${cap}`);
        pausesHold();
      } else if (s === 7) {
        // lock-delay: no token check. The ending is checked against the storage's rows, in the
        // order it took them (several writes can land in one tick), what it holds at the end,
        // and B's grant as the log prints the core's output — not against the scene's verdict
        const rows = (await page.evaluate(() => window.fencelockDemo.rows)).store;
        const contents = (await page.evaluate(() => window.fencelockDemo.contents)).store;
        const [aSession, bSession] = [...logText.matchAll(/reply: opened \{session: (\d+)/g)].map((m) => m[1]); // A opens first
        const bGrant = log.find((l) => /^t=\d+\s/.test(l) && new RegExp(`reply to session ${bSession}: granted \\{|granted \\{session: ${bSession},`).test(l));
        const bGrantT = bGrant ? Number(bGrant.match(/^t=(\d+)/)[1]) : null;
        const stale = rows.map((r, i) => ({ r, i })).filter(({ r }) => r.accepted && r.stale);
        const bWrote = (upTo) => rows.slice(0, upTo).find((x) => x.by === 'B' && x.accepted);
        for (const { r, i } of stale) {
          assert.ok(cap.includes(`late write landed at t=${r.t}`), `${where}: the ending names the late write at t=${r.t}: ${cap}`);
          const over = rows.slice(i + 1).find((x) => x.accepted && x.part === r.part);
          if (over) assert.ok(cap.includes(`${over.by} then wrote ${r.part} over it at t=${over.t}`), `${where}: ${over.by} overwrote it at t=${over.t}: ${cap}`);
          else {
            assert.ok(cap.includes(`the storage still holds A's stale ${r.part}`), `${where}: nothing overwrote it: ${cap}`);
            assert.equal(contents[r.part]?.stale, true, `${where}: the storage holds it`);
          }
          const before = bWrote(i);
          if (before) assert.ok(cap.includes(`had started writing at t=${before.t}`), `${where}: B wrote first, at t=${before.t}: ${cap}`);
        }
        if (!stale.length) assert.doesNotMatch(cap, /late write landed/, `${where}: ${cap}`);
        assert.doesNotMatch(cap, /refused/, `${where}: nothing checks tokens here: ${cap}`);
        // drained: every late write landed before the core granted B the lock
        const drained = stale.length > 0 && stale.every(({ r }) => bGrantT == null || bGrantT > r.t);
        assert.equal(/it drained/.test(cap), drained, `${where}: drained (B granted at ${bGrantT}): ${cap}`);
        assert.equal(/had started writing/.test(cap), stale.some(({ i }) => bWrote(i)), `${where}: ${cap}`);
        if (stale.length && !rows.some((x) => x.by === 'B')) assert.match(cap, /B never wrote/, `${where}: ${cap}`);
        if (/Lock-delay helped/.test(cap)) assert.ok(drained && stale.every(({ r, i }) => rows.slice(i + 1).some((x) => x.by === 'B' && x.part === r.part)), `${where}: ${cap}`);
        if (/A's session never expired/.test(cap)) assert.doesNotMatch(logText, new RegExp(`session_expired \\{session: ${aSession}\\}`), `${where}: ${cap}`);
        pausesHold();
      } else if (s === 6) {
        // Redlock and consensus: each side's refusals and stale writes, as the storages decided
        const o = await outcomeNow();
        const side = cap.match(/Outcome — Redlock: (.*?)\. Consensus: (.*?)\./);
        assert.ok(side, `${where}: ${cap}`);
        for (const [words, v, what] of [[side[1], o.redlock, 'value'], [side[2], o.consensus, 'token']]) {
          for (const r of v.refused) assert.ok(words.includes(`${r.by}'s ${what} ${r.token} refused (${r.token} < ${r.highest})${r.legit ? ' while it held the lock' : ''}`), `${where}: ${words}`);
          assert.equal((words.match(/ refused \(/g) ?? []).length, v.refused.length, `${where}: ${words}`);
          for (const t of v.stale) assert.ok(words.includes(`stale ${t} landed`), `${where}: ${words}`);
          assert.equal((words.match(/ landed/g) ?? []).length - (/no stale write landed/.test(words) ? 1 : 0), v.stale.length, `${where}: ${words}`);
          assert.equal(/data corrupted/.test(words), v.corrupted, `${where}: ${words}`);
        }
        const fencing = await page.locator('[data-testid=param-fencing]').isChecked();
        assert.equal(/turn on/.test(cap), !fencing, `${where}: ${cap}`);
      } else if (s === 8) {
        // permits: every expiry and every grant after the start named with its time and token,
        // the peak and the watcher's count the core's
        const o = await outcomeNow();
        const short = (l) => l.split(' (')[0];
        assert.ok(o.fencelock.maxInUse <= 3, `${where}: ${JSON.stringify(o.fencelock)}`);
        assert.ok(cap.includes(`Permits in use never went above 3 (at most ${o.fencelock.maxInUse})`), `${where}: ${cap}`);
        assert.ok(cap.includes(`the dashboard read ${o.feed} holder changes`), `${where}: ${cap}`);
        for (const e of o.fencelock.expiries) assert.ok(cap.includes(`${short(e.label)}'s permit came back when its session expired at t=${e.t}`) || e.token == null, `${where}: ${cap}`);
        for (const g of o.fencelock.grants.filter((x) => x.t > 0)) assert.ok(cap.includes(`${short(g.label)} was granted token ${g.token} at t=${g.t}`) || cap.includes(`${short(g.label)} got token ${g.token} at t=${g.t}`), `${where}: ${short(g.label)}, ${g.token}, t=${g.t}: ${cap}`);
        for (const l of o.counter.leaked) assert.ok(cap.includes(short(l)), `${where}: the leak of ${l}: ${cap}`);
        assert.equal(/Still queued/.test(cap), o.fencelock.waiting.length > 0, `${where}: ${cap}`);
        const pool = await page.evaluate(() => window.fencelockDemo.inspect('svc', 'db/pool'));
        assert.equal(o.fencelock.inUse, pool.permits?.inUse ?? 0, `${where}: permits in use are the core's`);
      } else if (s === 2) {
        const [qw, qx] = await page.locator('[data-testid=counters-queue]').evaluate((g) => [g.dataset.wakeups, g.dataset.wasted]);
        const [hw, hx] = await page.locator('[data-testid=counters-herd]').evaluate((g) => [g.dataset.wakeups, g.dataset.wasted]);
        assert.match(cap, new RegExp(`\\(${qw} wake-ups, ${qx} wasted\\).*${hw} wake-ups, ${hx} of them wasted`), `${where}: ${cap}`);
        const busy = log.filter((l) => !l.startsWith('t=0') && /Herd\s+reply to session \d+: busy \{/.test(l)).length;
        assert.equal(Number(hx), busy, `${where}: wasted = the herd core's busy answers`);
      } else {
        const redis = Number(await text('[data-testid=holders-redis]'));
        const raft = Number(await text('[data-testid=holders-raft]'));
        assert.match(cap, new RegExp(`single Redis: ${redis} holders?\\b.*Consensus: ${raft} holder`), `${where}: ${cap}`);
      }
      checked += 1;
    }
  } catch (e) {
    e.message = `${e.message} (replay with DEMO_SEED=${seed})`;
    throw e;
  }
  assert.equal(checked, TRIALS);
});

/** Every step of the timeline from the first: its caption, each client's status, the service box. */
async function everyStep() {
  await scrubTo(1);
  return page.evaluate(() => {
    const q = (sel) => document.querySelector(sel);
    const out = [];
    for (;;) {
      out.push({
        step: Number(q('[data-testid=clock]').dataset.step),
        caption: q('[data-testid=caption-text]').textContent,
        status: Object.fromEntries([...document.querySelectorAll('#stage [data-client]')].map((g) => [g.dataset.client, g.dataset.status])),
        service: q('#stage [data-testid=service]')?.textContent.replace(/\s+/g, ' ') ?? '',
      });
      if (document.body.dataset.atEnd === 'true') return out;
      q('[data-testid=step]').click(); // draws synchronously
    }
  });
}

test('captions at every step (not only the stops) say what a client does as its status says, and who holds the lock as the core says, after interventions (scenes 1, 3, 5, 7; seeded)', async () => {
  const seed = Number(process.env.DEMO_SEED ?? 20261207);
  const rnd = rng(seed); // the page's own seeded generator (mulberry32)
  const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
  const fired = {};
  const check = (name) => (fired[name] = (fired[name] ?? 0) + 1);
  /** Checks every caption of the current timeline against the picture of its step. */
  const checkAll = async (where) => {
    for (const st of await everyStep()) {
      const at = `${where}, step ${st.step}: "${st.caption}"`;
      const running = (id, claim) => {
        assert.equal(st.status[id], 'running', `${at}: ${claim}, but ${id} is ${st.status[id]}`);
        check(claim.replace(id, 'X'));
      };
      for (const [, id] of st.caption.matchAll(/\b([A-Z]\w*) keeps heartbeating/g)) running(id, `${id} keeps heartbeating`);
      for (const [, id] of st.caption.matchAll(/\b([A-Z]\w*) holds the lock and works/g)) running(id, `${id} works`);
      for (const [, x, y] of st.caption.matchAll(/\b([A-Z]\w*) and ([A-Z]\w*) heartbeat and wait/g)) {
        running(x, `${x} heartbeats and waits`);
        running(y, `${y} heartbeats and waits`);
      }
      for (const [, id] of st.caption.matchAll(/\b([A-Z]\w*) heartbeats and waits/g)) running(id, `${id} heartbeats and waits`);
      for (const [, id, epoch] of st.caption.matchAll(/\b([A-Z]\w*) leads with epoch (\d+) and acts/g)) {
        running(id, `${id} acts as leader`);
        assert.match(st.service, new RegExp(`holder ${id} · token ${epoch}(?!\\d)`), `${at}: the service lists ${id} with epoch ${epoch}`);
      }
      // a frozen client whose session is gone: the caption names who holds the lock now, as
      // the service lists it (killing the other client can leave nobody)
      if (/is still frozen and unaware/.test(st.caption)) {
        const held = st.caption.match(/\b(\w+) \((?:token|fenceToken) (\d+)\) holds it now/) ?? st.caption.match(/\b(\w+) holds the lock now/);
        if (held) {
          assert.match(st.service, new RegExp(`holder ${held[1]} · token ${held[2] ?? '\\d+'}(?!\\d)`), `${at}: the service lists that holder`);
          check('X holds it now');
        } else {
          assert.match(st.caption, /\bnobody holds it now/, `${at}: the caption names who holds the lock`);
          assert.match(st.service, /holder free/, `${at}: the service lists no holder`);
          check('nobody holds it now');
        }
      }
    }
  };
  try {
    // the runs that once went wrong, then seeded random ones
    await open(1);
    await intervene('B', 'kill', 2); // t=1: B's session expires with A's, and nobody is granted
    await checkAll('scene 1, B killed at t=1');
    await page.keyboard.press('r');
    await intervene('A', 'pause', 2); // you pause A (no GC pause then); B is granted at A's expiry
    await intervene('B', 'pause', (await stepOf('B gets 35')) + 4); // B works, then is paused while it holds
    await checkAll('scene 1, A and B paused');
    await page.click('[data-testid=tab-3]');
    await intervene('N2', 'kill', 2);
    await checkAll('scene 3, N2 killed at t=1');
    await page.keyboard.press('r');
    await intervene('N2', 'kill', (await stepOf('N2 leads, epoch 8')) + 1); // the leader the core lists is dead
    await checkAll('scene 3, N2 killed as it leads');
    for (let trial = 0; trial < 12; trial += 1) {
      const s = pick([1, 3, 5, 7]);
      await page.click(`[data-testid=tab-${s}]`);
      await page.keyboard.press('r');
      for (let round = 0, n = 1 + Math.floor(rnd() * 2); round < n; round += 1) {
        const length = await stepsOf();
        await scrubTo(1 + Math.floor(rnd() * length));
        const clients = await page.locator('[data-client]').evaluateAll((gs) => gs.map((g) => g.dataset.client));
        await page.click(`[data-client="${pick(clients)}"]`);
        const actions = await page.locator('#menu [data-action]').evaluateAll((bs) => bs.map((b) => b.dataset.action).filter((x) => x !== 'close'));
        await page.click(`#menu [data-action="${pick(actions)}"]`);
      }
      await checkAll(`trial ${trial}, scene ${s}`);
    }
  } catch (e) {
    e.message = `${e.message} (replay with DEMO_SEED=${seed})`;
    throw e;
  }
  // each kind of claim was met and checked at least once
  for (const claim of ['X keeps heartbeating', 'X works', 'X heartbeats and waits', 'X acts as leader', 'X holds it now', 'nobody holds it now']) {
    assert.ok(fired[claim] >= 1, `the claim "${claim}" was checked (checked: ${JSON.stringify(fired)})`);
  }
});

// ------------------------------------------------------------------ scene 6: Redlock

const outcomeNow = () => page.evaluate(() => window.fencelockDemo.outcome);
const badge = (id) => page.getAttribute(`[data-testid=client-${id}]`, 'data-badge');

test('scene 6, clock jump, "checks tokens" on: B collects N3–N5 while A still believes; the storage orders random values by luck, the consensus side refuses token 1', async () => {
  await open(6);
  await setSwitch('fencing', true);
  // the first caption's terms are defined as Redlock means them, not as the consensus scenes do
  const defs = await page.locator('[data-testid=terms] [data-term]').evaluateAll((ps) => Object.fromEntries(ps.map((p) => [p.dataset.term, p.textContent])));
  assert.match(defs.majority ?? '', /3 of 5 independent nodes/);
  assert.match(defs['own clock'] ?? '', /Redlock node's own clock/);
  assert.doesNotMatch(await text('[data-testid=caption-text]'), /B is in its wait queue/, 'B has not asked yet');
  // the story's stops, in order
  const labels = (await page.evaluate(() => window.fencelockDemo.milestones)).map((m) => m.label);
  assert.deepEqual(labels.slice(0, 5), ['five nodes', 'A holds 3/5', 'A writes', 'N3 clock jumps', 'B holds 3/5']);
  await scrubTo(await stepOf('N3 clock jumps'));
  // N3's own clock jumped: the node shows it, and the caption says the same number
  const n3 = await page.getAttribute('[data-testid=rl-N3]', 'data-clock');
  assert.equal(n3, '13');
  assert.match(await text('[data-testid=caption-text]'), /N3's clock jumps 10 s forward .* now reads t=13/);
  assert.equal(await page.getAttribute('[data-testid=rl-N3]', 'data-holder'), '', 'A\'s key on N3 expired by N3\'s clock');
  assert.equal(await page.getAttribute('[data-testid=rl-N1]', 'data-holder'), 'A');
  await scrubTo(await stepOf('B holds 3/5'));
  // two clients hold "the" lock: B by a majority of real cores, A by its own belief
  assert.match(await badge('B'), /^holds \d+ · 3\/5$/);
  assert.match(await badge('A'), /^believes \d+ · 2\/5$/);
  for (const n of ['N3', 'N4', 'N5']) assert.equal(await page.getAttribute(`[data-testid=rl-${n}]`, 'data-holder'), 'B');
  await jumpToEnd();
  const o = await outcomeNow();
  // seed 1: A's random value is the larger, so the storage refuses B (who held the lock) and takes A's stale write
  assert.equal(o.redlock.safe, false);
  assert.ok(o.redlock.refused.some((r) => r.by === 'B' && r.legit), JSON.stringify(o.redlock));
  assert.equal(o.redlock.stale.length, 1);
  assert.deepEqual(o.consensus.refused.map((r) => [r.token, r.highest]), [[1, 2]]);
  assert.deepEqual(o.consensus.stale, []);
  assert.equal(o.consensus.safe, true);
  // the page says so
  const state = await text('[data-testid=state]');
  assert.match(state, /1 < 2/);
  assert.match(await text('[data-testid=caption-text]'), /Checking tokens cannot help Redlock: its values are random, so their order means nothing — the storage turned away the rightful holder and let a stale writer through/);
  assert.match(await text('[data-testid=caption-text]'), /Consensus: A's token 1 refused \(1 < 2\)/);
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'corrupted');
  // every consensus-side input went in at the service's clock, jumped or not: the core
  // refused none of them as time gone back (B's keep-alive, release and close were)
  const back = await page.locator('[data-testid=log] li').evaluateAll((ls) => ls.filter((l) => /time_went_backwards/.test(l.textContent)).length);
  assert.equal(back, 0, 'no consensus input stamped behind the service clock');
  await shot('scene-6-jump');
});

test('scene 6, clock jump, "checks tokens" off: both sides corrupt the data', async () => {
  await open(6);
  await setSwitch('fencing', false);
  await jumpToEnd();
  const o = await outcomeNow();
  assert.equal(o.redlock.corrupted, true);
  assert.equal(o.consensus.corrupted, true);
  assert.deepEqual(o.consensus.stale, [1]);
  assert.deepEqual(o.consensus.refused, []);
  assert.match(await text('[data-testid=caption-text]'), /Nothing checked anything: turn on "storage checks tokens" — it saves the consensus side, not Redlock/);
  assert.equal(await page.locator('[data-testid=store] [data-testid=banner]').textContent(), 'DATA CORRUPTED');
  assert.equal(await page.locator('[data-testid=store2] [data-testid=banner]').textContent(), 'DATA CORRUPTED');
});

test('scene 6, A pauses after acquiring: its validity runs out, B acquires on all five, A wakes and writes; fencing on and off', async () => {
  await open(6);
  await page.locator('[data-testid=param-scenario]').selectOption('pause');
  await setSwitch('fencing', true);
  const labels = (await page.evaluate(() => window.fencelockDemo.milestones)).map((m) => m.label);
  assert.deepEqual(labels, ['five nodes', 'A holds 5/5', 'A writes', 'A pauses', 'keys expire', 'B holds 5/5', labels[6], labels[7], 'outcome']);
  await scrubTo(await stepOf('B holds 5/5'));
  assert.match(await badge('A'), /^GC pause · believes \d+ · 0\/5$/);
  assert.match(await badge('B'), /^holds \d+ · 5\/5$/);
  await jumpToEnd();
  let o = await outcomeNow();
  assert.equal(o.redlock.safe, false, 'a random value cannot be fenced');
  assert.deepEqual(o.consensus.refused.map((r) => [r.token, r.highest]), [[1, 2]]);
  assert.equal(o.consensus.safe, true);
  await setSwitch('fencing', false);
  await jumpToEnd();
  o = await outcomeNow();
  assert.equal(o.redlock.corrupted, true);
  assert.equal(o.consensus.corrupted, true);
  // a pause shorter than the validity: nothing goes wrong on either side
  await setSlider('pause', 5);
  await jumpToEnd();
  o = await outcomeNow();
  assert.equal(o.redlock.safe, true, JSON.stringify(o));
  assert.equal(o.consensus.safe, true, JSON.stringify(o));
});

test('scene 6: another seed makes the random values fall the other way — the stale write is refused, by luck, and the ending says so', async () => {
  await open(6);
  await setSwitch('fencing', true);
  await setSlider('seed', 4);
  await jumpToEnd();
  const o = await outcomeNow();
  assert.deepEqual(o.redlock.stale, []);
  assert.ok(o.redlock.refused.some((r) => r.by === 'A' && !r.legit), JSON.stringify(o.redlock));
  assert.match(await text('[data-testid=caption-text]'), /Redlock's stale write was refused only because its random value happened to be lower: that is luck, not order/);
});

test('scene 6, Try this: no clock jump — B gets its majority only after A is done, and the storage still refuses B, the rightful holder, for its lower random value', async () => {
  await open(6);
  await setSwitch('fencing', true);
  await setSlider('jump', 0);
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  assert.ok(!ms.some((m) => m.label === 'N3 clock jumps'), 'no jump, no jump milestone');
  const bHolds = ms.find((m) => m.label === 'B holds 5/5');
  assert.ok(bHolds, ms.map((m) => m.label).join(', '));
  await scrubTo(bHolds.step);
  assert.equal(await badge('A'), 'done');
  await jumpToEnd();
  const o = await outcomeNow();
  assert.deepEqual(o.redlock.stale, []);
  assert.ok(o.redlock.refused.some((r) => r.by === 'B' && r.legit), JSON.stringify(o.redlock));
  assert.equal(o.consensus.safe, true);
});

test('scene 6, story: the play key stops at every milestone in order, and each caption agrees with the stage', async () => {
  await open(6);
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  for (const m of ms.slice(1)) {
    await page.keyboard.press('Space');
    await page.waitForSelector('body[data-playing="false"]');
    assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), String(m.step), `stopped at "${m.label}"`);
    const cap = await text('[data-testid=caption-text]');
    // "X acquires on N of 5 (…)" → X's badge counts N nodes, and those nodes list X
    const got = cap.match(/(A|B) acquires on (\d) of 5 \(([^)]*)\)/);
    if (got) {
      assert.match(await badge(got[1]), new RegExp(`· ${got[2]}/5$`));
      for (const n of got[3].split(/, | and /)) assert.equal(await page.getAttribute(`[data-testid=rl-${n}]`, 'data-holder'), got[1], `${n} lists ${got[1]}`);
    }
    // "… is refused (a < b)" → a refused chip a < b
    for (const r of cap.matchAll(/refused \((\d+) < (\d+)\)/g)) assert.match(await text('[data-testid=state]'), new RegExp(`${r[1]} < ${r[2]}`));
  }
});

// ------------------------------------------------------------------ scene 7: lock-delay

test('scene 7, lock-delay 6 s, pause 8 s: the service holds the lock free after A expires, A\'s late write drains before B starts', async () => {
  await open(7);
  await scrubTo(await stepOf('A expires'));
  // the core's lock-delay, read from the service box: expired at t=8, held back until t=14
  assert.equal(await page.locator('[data-testid=lock-delay]').textContent(), 'until t=14');
  assert.match(await text('[data-testid=caption-text]'), /the service holds the lock free until t=14 \(lock-delay 6 s\)/);
  await scrubTo(await stepOf('B gets 2'));
  assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), String(await stepOf('B gets 2')));
  assert.equal((await page.evaluate(() => window.fencelockDemo.milestones)).find((m) => m.label === 'B gets 2').t, 14);
  await jumpToEnd();
  const o = await outcomeNow();
  assert.equal(o.drain, 'drained');
  assert.deepEqual(o.stale, [1]);
  assert.equal(o.corrupted, false, 'B\'s run wrote over the drained write');
  const cap = await text('[data-testid=caption-text]');
  assert.match(cap, /A's late write landed at t=12 \(its session had expired at t=8\), while the service held the lock back \(lock-delay until t=14\), before B was granted it \(at t=14, when the 6 s lock-delay ended\): it drained/);
  // B's run wrote over it: the storage's rows and what it holds at the end say so
  const rows = (await page.evaluate(() => window.fencelockDemo.rows)).store;
  const late = rows.findIndex((r) => r.stale);
  const over = rows.slice(late + 1).find((r) => r.part === rows[late].part);
  assert.deepEqual([over.by, over.t], ['B', 16]);
  assert.ok(cap.includes(`B then wrote ${rows[late].part} over it at t=16. Lock-delay helped`), cap);
  const contents = (await page.evaluate(() => window.fencelockDemo.contents)).store;
  assert.deepEqual(Object.values(contents).map((c) => [c.by, c.stale]), [['B', false], ['B', false]]);
  await shot('scene-7-drained');
});

test('scene 7: a write already on the wire lands though its sender learnt as it woke that it lost the lock (sent at t=11, keep-alive refused at t=11, lands at t=12)', async () => {
  await open(7);
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  const sends = ms.find((m) => m.label === 'A sends 1');
  const lands = ms.find((m) => m.label === '1 lands');
  assert.deepEqual([sends?.t, lands?.t], [11, 12]);
  await scrubTo(sends.step);
  // A's renewal thread sent its overdue keep-alive as A woke: the service no longer knows the session
  assert.equal(await badge('A'), 'lost the lock');
  const log = await page.locator('[data-testid=log] li').allInnerTexts();
  assert.ok(log.some((l) => /^t=11\s/.test(l) && /refused keepAlive\(session: 1\): unknown_session/.test(l)), log.join('\n'));
  assert.ok(log.some((l) => /^t=11\s/.test(l) && /A learns it lost the lock: its keepAlive was refused: unknown_session/.test(l)), log.join('\n'));
  assert.match(await text('[data-testid=caption-text]'), /Now A knows it lost the lock — but the write has already left/);
  assert.deepEqual((await page.evaluate(() => window.fencelockDemo.rows)).store.filter((r) => r.stale), [], 'nothing stale has landed yet');
  await scrubTo(lands.step);
  const rows = (await page.evaluate(() => window.fencelockDemo.rows)).store;
  assert.deepEqual(rows.filter((r) => r.stale).map((r) => [r.t, r.by, r.token]), [[12, 'A', 1]]);
  await jumpToEnd();
  const o = await outcomeNow();
  assert.equal(o.drain, 'drained');
  assert.deepEqual(o.stale, [1]);
});

test('scene 7: A resumed early — the ending gives the pause A really had, not the slider\'s', async () => {
  await open(7);
  await intervene('A', 'resume', 5); // t=4: paused at t=3 for 8 s by the slider, resumed after 1 s
  await jumpToEnd();
  const cap = await text('[data-testid=caption-text]');
  assert.match(cap, /A's session never expired: A was paused 1 s \(t=3–4\)/);
  assert.doesNotMatch(cap, /8 s/);
});

test('scene 7: no lock-delay — B starts the moment A expires and A\'s late write lands inside B\'s run', async () => {
  await open(7);
  await setSlider('delay', 0);
  await jumpToEnd();
  const o = await outcomeNow();
  assert.equal(o.drain, 'broken');
  assert.equal(o.corrupted, true);
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'corrupted');
  assert.match(await text('[data-testid=caption-text]'), /With no lock-delay, B was granted the moment A expired/);
});

test('scene 7: a pause longer than the lock-delay still breaks it; a pause shorter than the timeout never needed it', async () => {
  await open(7);
  await setSlider('pause', 16);
  await jumpToEnd();
  let o = await outcomeNow();
  assert.equal(o.drain, 'broken');
  assert.equal(o.corrupted, true);
  assert.match(await text('[data-testid=caption-text]'), /The 6 s lock-delay covers a write that arrives within 6 s of the expiry; A was paused 16 s \(t=3–19\), and a pause has no bound/);
  await setSlider('pause', 2);
  await jumpToEnd();
  o = await outcomeNow();
  assert.equal(o.drain, 'ok');
  assert.deepEqual(o.stale, []);
  assert.match(await text('[data-testid=caption-text]'), /A's session never expired/);
});

// ------------------------------------------------------------------ recordings

const SAMPLE = path.join(root, 'web-demo', 'recordings', 'paused-holder.flrec');
const sampleText = () => readFileSync(SAMPLE, 'utf8');

async function openRecording(buffer, name = 'paused-holder.flrec') {
  // the page sets data-recording when it has read this file ("open" or "error"): clear what an
  // earlier file left, so the wait below is for this one
  await page.evaluate(() => delete document.body.dataset.recording);
  await page.setInputFiles('[data-testid=rec-file]', { name, mimeType: 'text/plain', buffer: Buffer.from(buffer) });
  await page.waitForSelector('body[data-recording]', { state: 'attached' });
}

/** The grants the recorded clients saw: [session, lock, token] from replies and events. */
function recordedGrants(text) {
  const out = [];
  for (const row of text.trim().split('\n').slice(1)) {
    const o = JSON.parse(row.split('\t')[0]);
    if (o.reply?.kind === 'granted') out.push([o.input.session, o.input.lock, o.reply.token]);
    for (const e of o.events ?? []) if (e.kind === 'granted') out.push([e.session, e.lock, e.token]);
  }
  return out;
}

test('replay: the sample recording opened with the file picker shows the recorded grants, tokens, expiry and refused write', async () => {
  await open(1);
  await openRecording(sampleText());
  assert.equal(await page.getAttribute('body', 'data-recording'), 'open');
  assert.equal(await text('[data-testid=scene-title]'), 'Recording · paused-holder.flrec');
  assert.equal(await page.getAttribute('[data-testid=tab-9]', 'aria-pressed'), 'true');
  const grants = recordedGrants(sampleText());
  assert.deepEqual(grants, [[1, 'jobs/reindex', 1], [3, 'cache/warm', 2], [2, 'jobs/reindex', 3]]);
  // each recorded grant is a milestone, and at it the core's service box and the log show it
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  for (const [session, lock, token] of grants) {
    const m = ms.find((x) => x.label === `session ${session} gets ${token}`);
    assert.ok(m, `a milestone for session ${session}'s token ${token} (have ${ms.map((x) => x.label).join(', ')})`);
    await scrubTo(m.step);
    assert.match(await text('[data-testid=caption-text]'), new RegExp(`session ${session}.* granted "${lock.replace('/', '\\/')}" with token ${token}`));
    // a grant is either the reply to the session's acquire or an event naming session and lock
    assert.match(await text('[data-testid=log]'), new RegExp(`reply to session ${session}: granted \\{mode: "exclusive", token: ${token}\\}|granted \\{session: ${session}, lock: "${lock.replace('/', '\\/')}", mode: "exclusive", token: ${token}\\}`));
    if (lock === 'jobs/reindex') assert.match(await page.locator('[data-testid=service]').textContent(), new RegExp(`S${session} · token ${token}`));
  }
  await scrubTo((await page.evaluate(() => window.fencelockDemo.milestones)).find((x) => x.label === 'session 1 expires' || x.label === 'session 2 gets 3').step);
  assert.match(await text('[data-testid=log]'), /session_expired \{session: 1\}/);
  await jumpToEnd();
  assert.equal(await page.locator('[data-testid=refused-1]').textContent(), '1 < 3');
  assert.equal(await text('[data-testid=state-highest]'), '3');
  assert.match(await text('[data-testid=caption-text]'), /End of the recording: 22 lines replayed into a fresh core, every answer the same as recorded/);
  // the keyboard scrubs it like any scene
  const end = Number(await page.getAttribute('[data-testid=clock]', 'data-step'));
  await page.keyboard.press('ArrowLeft');
  assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), String(end - 1));
  await page.keyboard.press('Home');
  assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), '1');
  await shot('replay');
});

test('replay: search by lock name or session jumps to the lines that name it', async () => {
  await open(1);
  await openRecording(sampleText());
  await page.locator('[data-testid=search]').fill('cache/warm');
  await page.keyboard.press('Enter');
  assert.match(await text('[data-testid=caption-text]'), /line 7\): session 3 is granted "cache\/warm" with token 2/);
  assert.equal(await text('[data-testid=search-out]'), 'match 1 of 2 (line 7)');
  await page.click('[data-testid=search-next]');
  assert.match(await text('[data-testid=caption-text]'), /line 13\): session 3 releases "cache\/warm" \(token 2\)/);
  assert.equal(await text('[data-testid=search-out]'), 'match 2 of 2 (line 13)');
  // a session by number: every line that names session 1 (its open, acquire, keep-alive, expiry, refused keep-alive)
  await page.locator('[data-testid=search]').fill('session 1');
  await page.keyboard.press('Enter');
  assert.match(await text('[data-testid=search-out]'), /^match \d+ of 5 \(line \d+\)$/);
  assert.match(await text('[data-testid=caption-text]'), /session 1/);
  await page.locator('[data-testid=search]').fill('no/such/lock');
  await page.keyboard.press('Enter');
  assert.equal(await text('[data-testid=search-out]'), 'no line names "no/such/lock"');
  // typed key by key, the letters and the ? are the field's, not the page's shortcuts
  // (r resets, s toggles story mode, f flips a switch, ? opens the help)
  await jumpToEnd();
  const step = await page.getAttribute('[data-testid=clock]', 'data-step');
  const story = await page.locator('[data-testid=story]').isChecked();
  await page.locator('[data-testid=search]').fill('');
  await page.locator('[data-testid=search]').focus();
  await page.keyboard.type('jobs/reindex, sessions?');
  assert.equal(await page.locator('[data-testid=search]').inputValue(), 'jobs/reindex, sessions?');
  assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), step, 'no reset while typing');
  assert.equal(await page.locator('[data-testid=story]').isChecked(), story, 'story mode untouched');
  assert.equal(await page.evaluate(() => document.getElementById('help').open), false, 'no help dialog');
  // out of the field the same keys are shortcuts again
  await page.locator('[data-testid=search]').blur();
  await page.keyboard.press('?');
  assert.equal(await page.evaluate(() => document.getElementById('help').open), true);
  await page.keyboard.press('Escape');
});

test('replay: a damaged recording is reported with its line and the page keeps working; a lying one too; drag and drop opens one', async () => {
  await open(1);
  const rows = sampleText().split('\n');
  rows[4] = rows[4].replace('"token":1', '"token":9'); // line 5: damaged, its checksum no longer matches
  await openRecording(rows.join('\n'), 'damaged.flrec');
  assert.equal(await page.getAttribute('body', 'data-recording'), 'error');
  assert.match(await text('[data-testid=rec-error]'), /^Could not open damaged\.flrec: line 5: checksum mismatch/);
  assert.equal(await text('[data-testid=scene-title]'), '1 · The GC pause', 'the page keeps its scene');
  assert.equal(await page.locator('[data-testid=tab-9]').count(), 0);
  await playToEnd(); // and it still plays
  // a line that lies (checksum recomputed) is caught by the replay: the core answers otherwise
  const { crc32 } = await import('../src/recording.js');
  const lying = sampleText().split('\n');
  const body = lying[4].split('\t')[0].replace('"token":1', '"token":9');
  lying[4] = `${body}\t${crc32(body)}`;
  await openRecording(lying.join('\n'), 'lying.flrec');
  assert.match(await text('[data-testid=rec-error]'), /line 5: the core answers \{"kind":"granted","mode":"exclusive","token":1\}, the recording says .*"token":9/);
  // drag and drop the good one onto the page
  await page.evaluate((t) => {
    const dt = new DataTransfer();
    dt.items.add(new File([t], 'dropped.flrec', { type: 'text/plain' }));
    document.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
    document.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, sampleText());
  await page.waitForFunction(() => document.body.dataset.recording === 'open');
  assert.equal(await text('[data-testid=scene-title]'), 'Recording · dropped.flrec');
  assert.equal(await page.locator('[data-testid=rec-error]').isHidden(), true);
});

test('replay: a verified recording that still cannot be shown (its cores fail to start) is reported, and the page keeps its scene, step and interventions with live cores', async () => {
  await open(1);
  await intervene('B', 'kill', 2); // t=1
  await scrubTo(5);
  const before = await snapshot();
  // the core module the page imported (a module is loaded once per URL): from here on, a
  // restored core fails to start, as it would with no memory left. The check of the file
  // restores one core first; that one is let through, so the file passes it.
  await page.evaluate(async () => {
    const { LockService } = await import(new URL('pkg/fencelock_wasm.js', document.baseURI).href);
    const restore = LockService.restore;
    let calls = 0;
    window.restoreFails = { undo: () => (LockService.restore = restore) };
    LockService.restore = function (...args) {
      calls += 1;
      if (calls > 1) throw new Error('no memory left for the core');
      return restore.apply(this, args);
    };
  });
  await openRecording(sampleText());
  await page.evaluate(() => window.restoreFails.undo());
  assert.equal(await page.getAttribute('body', 'data-recording'), 'error');
  assert.match(await text('[data-testid=rec-error]'), /^Could not open paused-holder\.flrec: unexpected error: no memory left for the core\. The page keeps what it showed\.$/);
  assert.equal(await page.getAttribute('body', 'data-scene'), 'gc');
  assert.equal(await page.getAttribute('[data-testid=tab-1]', 'aria-pressed'), 'true');
  assert.equal(await page.locator('[data-testid=tab-9]').count(), 0);
  assert.equal(await text('[data-testid=scene-title]'), '1 · The GC pause');
  assert.deepEqual(await page.evaluate(() => window.fencelockDemo.interventions.map((x) => `${x.action} ${x.name} at t=${x.t}`)), ['kill B at t=1']);
  assert.deepEqual(await snapshot(), before, 'the same step, drawn the same');
  // its cores are alive: stepping forward and back, and a slider, call into them
  await page.click('[data-testid=step]');
  await page.click('[data-testid=step-back]');
  assert.deepEqual(await snapshot(), before);
  await setSlider('ttl', 12);
  await jumpToEnd();
  await assertOutcomeReached('scene 1 after the failed open');
  // and the recording opens once its cores can start
  await openRecording(sampleText());
  assert.equal(await page.getAttribute('body', 'data-recording'), 'open');
  assert.equal(await text('[data-testid=scene-title]'), 'Recording · paused-holder.flrec');
});

test('a slider whose new timeline fails to build leaves the page on the old one, with live cores and the slider back where it was', async () => {
  await open(1);
  await scrubTo(4);
  const before = await snapshot();
  // the next core the page makes fails to tick, as it would with no memory left
  await page.evaluate(async () => {
    const { LockService } = await import(new URL('pkg/fencelock_wasm.js', document.baseURI).href);
    const tick = LockService.prototype.tick;
    LockService.prototype.tick = function () {
      LockService.prototype.tick = tick;
      throw new Error('no memory left for the core');
    };
  });
  const thrown = page.waitForEvent('pageerror');
  await setSlider('ttl', 12);
  // the failure is the page's own error, reported as such; nothing else went wrong
  assert.equal((await thrown).message, 'no memory left for the core');
  assert.deepEqual(problems.splice(0), ['pageerror: no memory left for the core']);
  assert.equal(await page.locator('[data-testid=param-ttl]').inputValue(), '10');
  assert.equal(await page.locator('output[data-for=ttl]').textContent(), '10s');
  assert.deepEqual(await snapshot(), before);
  await page.click('[data-testid=step]');
  await page.click('[data-testid=step-back]');
  assert.deepEqual(await snapshot(), before, 'the old timeline\'s cores still answer');
  await jumpToEnd();
  await assertOutcomeReached('scene 1 after the failed rebuild');
  assert.deepEqual(problems, []);
});

test('replay layout: no two stage labels overlap, no marker covers a label, text stays legible (every step, 1280 and 390 px)', async () => {
  for (const size of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    await open(1, size);
    if (size.width < 600) {
      // a phone opens it from "Try it" (the header keeps its row for the scenes): the real picker
      const phoneOpen = page.locator('[data-testid=open-recording-phone]');
      assert.equal(await phoneOpen.isVisible(), true);
      const [chooser] = await Promise.all([page.waitForEvent('filechooser'), phoneOpen.click()]);
      await chooser.setFiles(SAMPLE);
      await page.waitForFunction(() => document.body.dataset.recording === 'open');
      const tabs = await page.$eval('[data-testid=scene-tabs]', (n) => ({ row: n.getBoundingClientRect().height, pressed: n.querySelector('[aria-pressed="true"]').getBoundingClientRect().right <= n.getBoundingClientRect().right + 0.5 }));
      assert.ok(tabs.row < 40, `one row of tabs (${tabs.row}px)`);
      assert.ok(tabs.pressed, 'the recording\'s tab is scrolled into view');
    } else {
      assert.equal(await page.locator('[data-testid=open-recording-phone]').isVisible(), false);
      await openRecording(sampleText());
    }
    const length = await stepsOf();
    for (let k = 1; k <= length; k += 1) {
      await scrubTo(k);
      assert.deepEqual(await stageOverlaps(), [], `step ${k}, ${size.width} px wide`);
      assert.deepEqual(await layoutProblems({ laned: true, panelled: false }), [], `step ${k}, ${size.width} px wide`);
      const small = await smallestDrawingText();
      assert.ok(small.min >= 12 - 0.01, `step ${k}, ${size.width} px: "${small.which}" is drawn at ${small.min.toFixed(1)} px`);
    }
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 0, `the page overflows by ${overflow}px`);
  }
  await shot('replay-phone');
});

test('scene 7, story: the play key stops at every milestone in order, and each lock-delay the caption names is the core\'s', async () => {
  await open(7);
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  assert.deepEqual(ms.map((m) => m.label), ['A gets 1', 'A writes 1', 'A pauses', 'A expires', 'A sends 1', '1 lands', 'B gets 2', 'B writes 2', 'outcome']);
  let delays = 0;
  for (const m of ms.slice(1)) {
    await page.keyboard.press('Space');
    await page.waitForSelector('body[data-playing="false"]');
    assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), String(m.step), `stopped at "${m.label}"`);
    const cap = await text('[data-testid=caption-text]');
    const held = cap.match(/held back until t=(\d+)|holds the lock free until t=(\d+)/);
    if (held) {
      delays += 1;
      assert.equal(await page.locator('[data-testid=lock-delay]').textContent(), `until t=${held[1] ?? held[2]}`);
    }
    const got = cap.match(/grants the lock to the head of the queue, (A|B), with token (\d+)/);
    if (got) assert.equal(await badge(got[1]), `holds ${got[2]}`);
    if (m.label === 'B gets 2') assert.ok(got, cap);
  }
  assert.ok(delays >= 1, 'a caption named the lock-delay');
});

test('replay: a long recording shows the last 120 s of its timeline up to the cursor and the latest 400 log entries', async () => {
  const { Recorder } = await import('../src/recording.js');
  const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
  const svc = new api.LockService({ sessions: 4, locks: 2, claims: 4 });
  const rec = new Recorder(svc, { source: 'a long test run' });
  const a = rec.handle({ kind: 'open_session', now: 0, ttl: 30 }).reply.session;
  for (let now = 1; now <= 600; now += 1) {
    rec.handle({ kind: 'keep_alive', now, session: a });
    if (now % 10 === 0) rec.handle({ kind: 'acquire', now, session: a, lock: 'x', mode: 'exclusive', wait: 'none' });
    if (now % 10 === 5 && now > 5) rec.handle({ kind: 'release', now, session: a, lock: 'x' });
  }
  await open(1);
  await openRecording(rec.text(), 'long.flrec');
  await jumpToEnd();
  const ticks = await page.$$eval('[data-testid=swimlane] text.tick', (ts) => ts.map((t) => Number(t.textContent.replace('s', ''))));
  assert.equal(Math.max(...ticks), 600);
  assert.equal(Math.min(...ticks), 480, 'the window starts 120 s before the cursor');
  assert.match(await text('[data-testid=log-earlier]'), /^\d+ earlier entries not shown$/);
  assert.equal(await page.locator('[data-testid=log] li').count(), 401);
  // the last grant is on the stage: token 60, from the core
  assert.match(await page.locator('[data-testid=service]').textContent(), /S1 · token 60/);
  await scrubTo(3);
  const early = await page.$$eval('[data-testid=swimlane] text.tick', (ts) => ts.map((t) => Number(t.textContent.replace('s', ''))));
  assert.equal(Math.min(...early), 0);
});

test('replay: a recording whose ticks are milliseconds (tick_ms 1, as a cluster exports) shows ms and s; one without tick_ms still counts seconds', async () => {
  const { Recorder } = await import('../src/recording.js');
  const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
  const T0 = 100000; // a cluster's logical ms: the page counts t from the first line
  /** Two sessions in ms: a holds jobs/x, b waits; a expires at 3 s and b is granted 2; b keeps alive every 2 s up to `until` ms. */
  const cluster = (until) => {
    const svc = new api.LockService({ sessions: 4, locks: 2, claims: 4 });
    const rec = new Recorder(svc, { source: 'a cluster, in ms', tickMs: 1 });
    const a = rec.handle({ kind: 'open_session', now: T0, ttl: 3000 }).reply.session;
    const b = rec.handle({ kind: 'open_session', now: T0, ttl: 3000 }).reply.session;
    rec.handle({ kind: 'acquire', now: T0 + 250, session: a, lock: 'jobs/x', mode: 'exclusive', wait: 'forever' });
    rec.handle({ kind: 'acquire', now: T0 + 250, session: b, lock: 'jobs/x', mode: 'exclusive', wait: 'forever' });
    rec.handle({ kind: 'keep_alive', now: T0 + 1500, session: b });
    rec.handle({ kind: 'tick', now: T0 + 3100 }); // a expired at 3000: b is granted 2
    for (let now = T0 + 4000; now <= T0 + until; now += 2000) rec.handle({ kind: 'keep_alive', now, session: b });
    svc.free?.();
    return { a, b, text: rec.text() };
  };
  const { a, b, text: long } = cluster(200000);
  await open(1);
  await openRecording(long, 'cluster-ms.flrec');
  assert.equal(await page.getAttribute('body', 'data-recording'), 'open');
  const clock = () => text('[data-testid=clock]');
  const axis = () => page.$$eval('[data-testid=swimlane] text.tick', (ts) => ts.map((t) => t.textContent));
  // the first grant, 250 ms in: the clock and the caption say 250 ms, the caption keeps the exact now
  await scrubTo(await stepOf(`session ${a} gets 1`));
  assert.equal((await clock()).replace(/\s+/g, ' ').trim(), 't = 250 ms');
  assert.match(await text('[data-testid=caption-text]'), /^t=250 ms \(now 100250, line 4\): session 1 is granted "jobs\/x" with token 1/);
  assert.match(await page.getAttribute('[data-testid=scrubber]', 'aria-valuetext'), /^t = 250 milliseconds, step/);
  // the run is 200 s long: the timeline's window is 120 s of it (0 to 120 s), not 120 ms
  let labels = await axis();
  assert.equal(labels[0], '0');
  assert.equal(labels.at(-1), '120s');
  assert.ok(labels.slice(1).every((l) => /^\d+s$/.test(l)), labels.join(' '));
  // the expiry and the waiter's grant, 3.1 s in
  await scrubTo(await stepOf(`session ${b} gets 2`));
  assert.equal((await clock()).replace(/\s+/g, ' ').trim(), 't = 3.1 s');
  assert.match(await text('[data-testid=caption-text]'), /^t=3\.1 s \(now 103100, line 7\): .*session 1 expired.*session 2, waiting, is granted "jobs\/x" with token 2/);
  assert.match(await page.locator('[data-testid=service]').textContent(), /S2 · token 2/);
  // at the end, 200 s in: the timeline shows the 120 s up to the cursor (80 s to 200 s), not 120 ms
  await jumpToEnd();
  assert.equal((await clock()).replace(/\s+/g, ' ').trim(), 't = 200 s');
  labels = await axis();
  assert.equal(labels[0], '80s');
  assert.equal(labels.at(-1), '200s');
  assert.ok(labels.every((l) => /^\d+s$/.test(l)), labels.join(' '));
  // a short one (4 s) is shown whole, its axis in ms below a second and s from one on
  await openRecording(cluster(4000).text, 'cluster-short.flrec');
  await jumpToEnd();
  assert.equal((await clock()).replace(/\s+/g, ' ').trim(), 't = 4 s');
  labels = await axis();
  assert.deepEqual(labels, ['0', '500ms', '1s', '1.5s', '2s', '2.5s', '3s', '3.5s', '4s']);
  assert.equal(await page.getAttribute('[data-testid=swimlane] svg', 'aria-label'), 'Timeline up to t=4 s');
  // on a phone the longer times fit: the ms recording at 390 px, every step, no overflow, clock whole
  await open(1, { width: 390, height: 844 });
  await openRecording(long, 'cluster-ms.flrec');
  const steps = await stepsOf();
  for (const k of [1, 4, 7, 20, steps]) {
    await scrubTo(k);
    const over = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(over <= 0, `step ${k}: the page overflows by ${over}px`);
    const clip = await page.$eval('[data-testid=clock]', (c) => c.scrollWidth - c.clientWidth);
    assert.ok(clip <= 0, `step ${k}: the clock's text is cut by ${clip}px`);
  }
  assert.equal((await clock()).replace(/\s+/g, ' ').trim(), '200 s');
  const phone = await axis();
  assert.ok(phone.length >= 3 && phone.length <= 7 && phone.every((l) => /^\d+s$/.test(l)), phone.join(' '));
  await page.setViewportSize({ width: 1280, height: 800 });
  // an older recording (no tick_ms) opens as before: a tick is a second
  await openRecording(sampleText());
  assert.equal(await text('[data-testid=scene-title]'), 'Recording · paused-holder.flrec');
  await jumpToEnd();
  // the last input line is the one before the end line
  const last = JSON.parse(sampleText().trim().split('\n').at(-2).split('\t')[0]).now - JSON.parse(sampleText().split('\n')[1].split('\t')[0]).now;
  assert.equal((await clock()).replace(/\s+/g, ' ').trim(), `t = ${last} s`);
  assert.ok((await axis()).every((l) => /^\d+s$/.test(l)));
  await scrubTo(await stepOf('session 2 gets 3'));
  assert.match(await text('[data-testid=caption-text]'), /^t=\d+ \(now \d+, line \d+\): /);
});

test('replay: a waiter\'s bar on the timeline gives its place in the core\'s queue now, as the stage does, not the place it joined at', async () => {
  // One holder and three waiters who join at #1, #2, #3; two releases move each waiter up.
  // The timeline's bar of a waiter is split where its place changes, each part labelled
  // with the place it had then, and at every step the bar at the cursor says what the
  // stage's badge (read from the core's wait queue) says.
  const { Recorder } = await import('../src/recording.js');
  const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
  const svc = new api.LockService({ sessions: 8, locks: 2, claims: 8 });
  const rec = new Recorder(svc, { source: 'a queue of three' });
  const s = [1, 2, 3, 4].map(() => rec.handle({ kind: 'open_session', now: 0, ttl: 100 }).reply.session);
  const joined = s.map((x) => rec.handle({ kind: 'acquire', now: 1, session: x, lock: 'jobs/q', mode: 'exclusive', wait: 'forever' }).reply);
  assert.deepEqual(joined.slice(1).map((r) => r.position), [1, 2, 3], 'the waiters joined at #1, #2, #3');
  rec.handle({ kind: 'release', now: 10, session: s[0], lock: 'jobs/q' });
  rec.handle({ kind: 'release', now: 20, session: s[1], lock: 'jobs/q' });
  rec.handle({ kind: 'tick', now: 30 });
  svc.free?.();
  await open(1);
  await openRecording(rec.text(), 'queue.flrec');
  assert.equal(await page.getAttribute('body', 'data-recording'), 'open');
  const steps = await stepsOf();
  let compared = 0;
  for (let k = 1; k <= steps; k += 1) {
    await scrubTo(k);
    const seen = await page.evaluate(() => {
      const out = {};
      for (const g of document.querySelectorAll('#stage [data-client]')) {
        const bar = document.querySelector(`[data-testid=swimlane] g.span.wait[data-lane="${g.dataset.client}"][data-open]`);
        out[g.dataset.client] = { badge: g.dataset.badge, bar: bar?.dataset.label ?? null };
      }
      return out;
    });
    for (const [id, { badge, bar }] of Object.entries(seen)) {
      if (!badge.startsWith('queued')) {
        assert.equal(bar, null, `step ${k}: ${id} is not queued (${badge}) and has no open queue bar`);
        continue;
      }
      assert.equal(bar, badge, `step ${k}: ${id}'s bar on the timeline says what the stage says`);
      compared += 1;
    }
  }
  assert.ok(compared >= 6, `queued badges compared with their bars: ${compared}`);
  // at the end the last waiter's lane shows its three places, in time order, with their times
  await jumpToEnd();
  const last = `s${s[3]}`;
  const bars = await page.$$eval(`[data-testid=swimlane] g.span.wait[data-lane="${last}"]`, (gs) => gs.map((g) => [g.dataset.label, Number(g.dataset.from), g.dataset.to == null ? null : Number(g.dataset.to)]));
  assert.deepEqual(bars, [['queued #3', 1, 10], ['queued #2', 10, 20], ['queued #1', 20, null]]);
  const words = await page.$$eval(`[data-testid=swimlane] text.span-label[data-lane="${last}"]`, (ts) => ts.map((t) => t.textContent));
  assert.deepEqual(words, ['queued #3', 'queued #2', 'queued #1'], 'and each part is labelled on screen');
  assert.equal(await page.locator(`[data-testid=client-${last}]`).getAttribute('data-badge'), 'queued #1');
});

// ------------------------------------------------------------------ scene 8: permits that leak

/** The stage and the core at the current step: what the semaphore box shows and what the core answers. */
async function permitsNow() {
  return page.evaluate(() => {
    const core = window.fencelockDemo.inspect('svc', 'db/pool');
    const box = document.querySelector('[data-testid=semaphore]');
    const slots = [...box.querySelectorAll('g.slot')].map((g) => ({ kind: g.dataset.slot, text: g.querySelector('text').textContent }));
    const ctr = document.querySelector('[data-testid=counter]');
    const badges = Object.fromEntries([...document.querySelectorAll('#stage [data-client]')].map((g) => [g.dataset.client, g.dataset.badge]));
    const feed = [...document.querySelectorAll('[data-testid=watch-feed] .feed-row')].map((t) => t.textContent);
    return {
      t: Number(document.querySelector('[data-testid=clock]').dataset.step),
      core,
      inUse: Number(box.dataset.inUse),
      limit: Number(box.dataset.limit),
      shownInUse: Number(document.querySelector('[data-testid=fl-in-use]').textContent),
      stateInUse: Number(document.querySelector('[data-testid=state-fl-in-use]').textContent),
      queue: document.querySelector('[data-testid=fl-queue]').textContent,
      slots,
      ctrFree: Number(ctr.dataset.free),
      ctrShown: Number(document.querySelector('[data-testid=ctr-free]').textContent),
      leaked: Number(ctr.dataset.leaked),
      badges,
      feedCount: Number(document.querySelector('[data-testid=watch-feed]').dataset.count),
      feed,
    };
  });
}

test('scene 8, permits that leak: permits in use are the core\'s and never above 3; the crashed holder\'s session expires, its permit returns and the head waiter gets a higher token; the counter side stays stuck', async () => {
  await open(8);
  assert.equal(await text('[data-testid=scene-title]'), '8 · Permits that leak');
  const length = await stepsOf();
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  const crashStep = ms.find((m) => m.label === 'worker-2 crashes').step;
  let crashed = null; // worker-2's hold and session deadline, as the core gives them at the crash
  let expiredAt = null;
  let seenFull = false;
  for (let k = 1; k <= length; k += 1) {
    await scrubTo(k);
    const s = await permitsNow();
    const where = `step ${k}`;
    // the box, the state panel and the core agree, and the limit holds
    const inUse = s.core.permits ? s.core.permits.inUse : 0;
    assert.equal(s.inUse, inUse, `${where}: the box's permits in use are the core's`);
    assert.equal(s.shownInUse, inUse, `${where}: the number drawn`);
    assert.equal(s.stateInUse, inUse, `${where}: the state panel`);
    assert.ok(inUse <= 3, `${where}: ${inUse} permits in use, above the limit`);
    if (s.core.permits) assert.equal(s.core.permits.limit, 3);
    const held = s.core.holders.reduce((n, h) => n + h.mode.permits, 0);
    assert.equal(held, inUse, `${where}: the holders' permits add up to permits in use`);
    seenFull ||= inUse === 3;
    // each held slot names a holder the core lists, with its label and token, in the core's order
    const filled = s.slots.filter((x) => x.kind !== 'free');
    assert.deepEqual(filled.map((x) => x.text.replace(/ · gone$/, '')), s.core.holders.map((h) => `${h.label} · token ${h.token}`), `${where}: slots`);
    assert.equal(s.slots.length, 3);
    // the queue line is the core's FIFO queue, by label
    const q = s.core.waiters.map((x, i) => `${i + 1}. ${x.label.split(' (')[0]}`).join('  ');
    assert.equal(s.queue.replace(/^queue\s*/, ''), q || 'empty', `${where}: queue`);
    // the counter side: what it shows is its own count, and after the crash it never has a free permit
    assert.equal(s.ctrShown, s.ctrFree);
    if (k >= crashStep) {
      assert.equal(s.ctrFree, 0, `${where}: the counter stays at 0 free`);
      assert.equal(s.leaked, 1, `${where}: one permit leaked on the counter side`);
    }
    if (k === 2) {
      // the dashboard's watch begins at t=1: one "holding" per holder the core lists, in grant order
      assert.deepEqual(s.feed, s.core.holders.map((h) => `t=1 holding ${h.label} · ${h.token}`), `${where}: the watch's first events`);
      assert.equal(s.feed.length, 3);
    }
    if (k === crashStep) {
      const h = s.core.holders.find((x) => x.label === 'worker-2 (pid 4711)');
      assert.ok(h, 'the core still lists the crashed worker-2 as a holder when it crashes');
      const info = s.core.sessions.find((x) => x.id === h.session);
      crashed = { token: h.token, session: h.session, expiresAt: info.expiresAt };
      assert.equal(info.label, 'worker-2 (pid 4711)');
      assert.equal(s.badges.f2, 'crashed');
      assert.equal(s.badges.c2, 'crashed');
    }
    if (crashed && expiredAt == null && !s.core.sessions.some((x) => x.id === crashed.session)) expiredAt = k;
  }
  assert.ok(seenFull, 'the semaphore was full at some point');
  assert.ok(crashed, 'the crash step was visited');
  // the expiry: at that step the head waiter, worker-4, holds a permit with a token above every earlier one
  await scrubTo(expiredAt);
  const s = await permitsNow();
  assert.equal(Number((await text('[data-testid=clock]')).match(/(\d+) s/)[1]), crashed.expiresAt, 'the crashed session expires at the deadline the core gave it (its last heartbeat + the timeout)');
  const w4 = s.core.holders.find((x) => x.label === 'worker-4 (pid 4730)');
  assert.ok(w4, 'worker-4, first in the queue, is granted when the crashed holder\'s session expires');
  assert.ok(w4.token > crashed.token && w4.token === s.core.revision, `worker-4's token ${w4.token} is new: above the crashed holder's ${crashed.token}, the core's revision`);
  assert.equal(s.badges.f4, `holds ${w4.token}`);
  assert.equal(s.badges.f5, 'queued #1', 'worker-5 moves up to the head of the queue');
  assert.equal(s.badges.c4, 'waiting');
  assert.match(await text('[data-testid=caption-text]'), new RegExp(`expires its session at t=${crashed.expiresAt}.*worker-4 \\(pid 4730\\), is granted with a new fencing token, ${w4.token}`));
  // the dashboard read both changes, in this order, right as they happened
  assert.deepEqual(s.feed.slice(-2), [`t=${crashed.expiresAt} expired worker-2 (pid 4711) · ${crashed.token}`, `t=${crashed.expiresAt} granted worker-4 (pid 4730) · ${w4.token}`]);
  // the end: worker-5 was served after worker-4 with a higher token; the counter side is stuck
  await jumpToEnd();
  const end = await permitsNow();
  const o = await outcomeNow();
  const grants = o.fencelock.grants.filter((g) => g.t > 0);
  assert.deepEqual(grants.map((g) => g.label), ['worker-4 (pid 4730)', 'worker-5 (pid 4736)'], 'FIFO: worker-4, then worker-5');
  assert.ok(grants[1].token > grants[0].token);
  assert.equal(o.fencelock.maxInUse, 3);
  assert.deepEqual(o.counter.waiting, ['worker-4 (pid 4730)', 'worker-5 (pid 4736)']);
  assert.equal(o.counter.free, 0);
  assert.equal(end.badges.c4, 'waiting');
  assert.equal(end.badges.c5, 'waiting');
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'stuck');
  // every HolderChanged the dashboard's session was sent is in its panel's count, and the log has them in the same order
  const log = await text('[data-testid=log]');
  const sent = [...log.matchAll(/holder_changed \{session: \d+, lock: "db\/pool", holder: \d+, mode: [^}]*\}, token: (\d+), change: "(\w+)", label: "([^"]*)"\}/g)].map((m) => `${m[2]} ${m[3]} · ${m[1]}`);
  assert.equal(end.feedCount, sent.length, 'the panel counts every event the watcher was sent');
  assert.deepEqual(end.feed.map((l) => l.replace(/^t=\d+ /, '')), sent.slice(-end.feed.length));
  assert.match(await text('[data-testid=caption-text]'), /will wait forever: the key says 0 free/);
  await shot('scene-8');
});

test('scene 8: the session timeout moves the expiry and the grant; with no crash both sides serve every worker; a kill on either side leaks or expires', async () => {
  await open(8);
  const when = async () => (await page.evaluate(() => window.fencelockDemo.milestones)).find((m) => /session expires$/.test(m.label));
  assert.equal((await when()).t, 7, 'last heartbeat at t=2, timeout 5 s');
  await setSlider('ttl', 9);
  assert.equal((await when()).t, 11, 'last heartbeat at t=2, timeout 9 s');
  await jumpToEnd();
  let o = await outcomeNow();
  assert.deepEqual(o.fencelock.expiries.map((e) => [e.t, e.label]), [[11, 'worker-2 (pid 4711)']]);
  assert.equal(o.fencelock.grants.find((g) => g.label.startsWith('worker-4')).t, 11);
  await setSlider('ttl', 5);
  await setSwitch('crash', false);
  await jumpToEnd();
  o = await outcomeNow();
  assert.deepEqual(o.counter.leaked, []);
  assert.deepEqual(o.counter.waiting, []);
  assert.equal(o.counter.free, 1, 'worker-2, worker-4 and worker-5 gave theirs back; the two consumers keep theirs');
  assert.deepEqual(o.fencelock.expiries, []);
  assert.deepEqual(o.fencelock.grants.filter((g) => g.t > 0).map((g) => g.label.split(' (')[0]), ['worker-4', 'worker-5']);
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'ok');
  // kill worker-1 (a long-running consumer) at t=2 on each side: its permit leaks on the left, comes back on the right
  await scrubTo(3);
  for (const id of ['c1', 'f1']) {
    await page.click(`#stage [data-client="${id}"]`);
    await page.click('#menu [data-action=kill]');
  }
  await jumpToEnd();
  o = await outcomeNow();
  assert.deepEqual(o.counter.leaked, ['worker-1 (pid 4702)']);
  assert.deepEqual(o.fencelock.expiries.map((e) => e.label), ['worker-1 (pid 4702)']);
  assert.equal(o.fencelock.waiting.length, 0, 'nobody is left waiting on the right');
  assert.ok(o.fencelock.maxInUse <= 3);
  // a paused holder is not a dead one, but it sends no heartbeat either: its session expires
  // and the caption says so without calling it dead
  await page.keyboard.press('r');
  await scrubTo(3);
  await page.click('#stage [data-client="f1"]');
  await page.click('#menu [data-action=pause]');
  const stop = (await page.evaluate(() => window.fencelockDemo.milestones)).find((m) => m.label === "w1's session expires");
  assert.ok(stop, 'worker-1\'s session expires while it is paused');
  await scrubTo(stop.step);
  assert.match(await text('[data-testid=caption-text]'), /no heartbeat from worker-1 \(pid 4702\) in time: the service expires its session/);
  assert.doesNotMatch(await text('[data-testid=caption-text]'), /dead/);
  assert.match(await page.getAttribute('[data-testid=client-f1]', 'data-badge'), /^paused · /);
  const after = await permitsNow();
  assert.ok(!after.core.holders.some((h) => h.label.startsWith('worker-1')), 'the core no longer lists the paused worker-1');
});

/** Pauses or resumes a client from its menu at the given step. */
async function intervene(id, action, step) {
  await scrubTo(step);
  await page.click(`#stage [data-client="${id}"]`);
  await page.click(`#menu [data-action=${action}]`);
}

test('a client paused while the core granted it the lock learns of the grant when it resumes (scenes 2, 4, 8)', async () => {
  // scene 2: C1 (head of the queue) paused at t=1; H releases at t=3 and the core grants C1
  // token 2 while it is paused; resumed at t=4, C1 holds it, works, releases, and the queue
  // goes on to serve everyone
  await open(2);
  await intervene('q1', 'pause', 2);
  await intervene('q1', 'resume', 5);
  await scrubTo(6); // its first step running again
  assert.equal(await badge('q1'), 'holds 2', 'C1 read what reached it while paused');
  await jumpToEnd();
  const q = await page.evaluate(() => window.fencelockDemo.inspect('queue', 'jobs/nightly'));
  assert.deepEqual([q.holders, q.waiters], [[], []], 'the ordered queue ends free and empty');
  assert.equal(await page.getAttribute('[data-testid=counters-queue]', 'data-wakeups'), '6');
  assert.ok(Number((await page.evaluate(() => window.fencelockDemo.milestones)).at(-1).t) < 60, 'the scene ends by itself, not at the time cap');
  // scene 4: A paused right after it asked the consensus side (t=2); a majority applies its
  // acquire at t=3 while it is paused; resumed at t=4, it holds token 1, as N2 says
  await open(4);
  await intervene('A2', 'pause', 3);
  await intervene('A2', 'resume', 5);
  await scrubTo(6);
  assert.equal(await badge('A2'), 'holds 1');
  await jumpToEnd();
  assert.equal(await text('[data-testid=holders-raft]'), '1');
  assert.match(await text('[data-testid=caption-text]'), /Consensus: 1 holder \(A with 1\)/);
  // scene 8: worker-4 (fencelock) paused at t=6, granted at t=7 when worker-2's session
  // expires, resumed at t=8: it holds its permit, finishes its job and releases; worker-5 follows
  await open(8);
  await intervene('f4', 'pause', 7);
  await intervene('f4', 'resume', 9);
  await scrubTo(10);
  assert.equal(await badge('f4'), 'holds 4');
  await jumpToEnd();
  const o = await outcomeNow();
  assert.deepEqual(o.fencelock.waiting, []);
  assert.ok(o.fencelock.grants.some((g) => g.label.startsWith('worker-5')), JSON.stringify(o.fencelock.grants));
  const pool = await page.evaluate(() => window.fencelockDemo.inspect('svc', 'db/pool'));
  assert.ok(!pool.holders.some((h) => h.label.startsWith('worker-4')), 'worker-4 released its permit');
});

test('scene 3: an action the old leader has sent reaches the DB whatever happens to N1 afterwards, and the ending says it bounced', async () => {
  await open(3);
  // N1 wakes and sends epoch 7; killed the moment after, its action is already on the wire
  await intervene('N1', 'kill', await stepOf('N1 sends epoch 7'));
  await jumpToEnd();
  const rows = (await page.evaluate(() => window.fencelockDemo.rows)).db;
  assert.deepEqual(rows.filter((r) => r.token === 7 && !r.accepted).map((r) => [r.by, r.highest]), [['N1', 8]], 'the sent epoch-7 action reached the DB and was refused');
  const cap = await text('[data-testid=caption-text]');
  assert.match(cap, /N1's action with epoch 7 bounced: the orders DB had already seen epoch 8 \(7 < 8\)/);
  assert.doesNotMatch(cap, /No stale action reached the DB/);
  // with the check off, the same action lands: two leaders acted
  await setSwitch('fencing', false);
  await jumpToEnd();
  assert.match(await text('[data-testid=caption-text]'), /N1's action with epoch 7 landed although N2 had been elected with epoch 8/);
});

test('a pause that ends one tick before the deadline keeps the session: the woken client sends its overdue keep-alive (scenes 1, 3, 7), and none that was not due (scene 5)', async () => {
  // scene 1: A's deadline is t=10 (session opened at t=0, paused at t=2 before its first
  // heartbeat); a 7 s pause ends at t=9, the keep-alive goes out with the write, nothing expires
  await open(1);
  await setSwitch('fencing', false);
  await setSlider('pause', 7);
  const wake = (await page.evaluate(() => window.fencelockDemo.milestones)).find((m) => m.label === 'A sends 34');
  assert.ok(wake, 'A wakes and sends its prepared write');
  assert.equal(wake.t, 9);
  await scrubTo(wake.step);
  assert.match(await text('[data-testid=caption-text]'), /Its session never expired, so it really does still hold the lock/);
  assert.equal(await badge('A'), 'holds 34', 'the core still lists A\'s grant');
  const sessions = (await page.evaluate(() => window.fencelockDemo.inspect('svc', 'jobs/reindex'))).sessions;
  assert.equal(sessions.find((x) => x.id === 2)?.expiresAt, 19, `the keep-alive sent as A woke renewed the session to t=19: ${JSON.stringify(sessions)}`);
  assert.match(await text('[data-testid=caption-text]'), /the service extends the session to t=19/);
  await jumpToEnd();
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'ok');
  assert.doesNotMatch(await text('[data-testid=log]'), /session_expired/);
  assert.match(await text('[data-testid=caption-text]'), /No session expired: A was paused 7 s \(t=2–9\)/);
  // an 8 s pause ends at the deadline: too late, the tick at t=10 expires A first
  await setSlider('pause', 8);
  await jumpToEnd();
  assert.match(await text('[data-testid=log]'), /session_expired \{session: 2\}/);
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'corrupted');
  // scene 3: N1's deadline is t=13 (last heartbeat t=3); a 7 s pause from t=5 ends at t=12
  await open(3);
  await setSlider('pause', 7);
  await jumpToEnd();
  assert.doesNotMatch(await text('[data-testid=log]'), /session_expired/);
  assert.match(await text('[data-testid=outcome]'), /One leader throughout · leader N1, epoch 7/);
  const rows = (await page.evaluate(() => window.fencelockDemo.rows)).db;
  const sent = rows.find((r) => r.t === 13);
  assert.ok(sent && sent.by === 'N1' && sent.token === 7 && sent.accepted && !sent.stale, `the action N1 sent at t=12 landed as the leader's: ${JSON.stringify(rows)}`);
  assert.match(await text('[data-testid=caption-text]'), /No session expired \(N1 was paused 7 s, less than the 10 s session timeout\): one leader throughout/);
  // scene 7: A's deadline is t=8 (heartbeat at t=2, 6 s timeout); a 4 s pause from t=3 ends at t=7
  await open(7);
  await setSlider('pause', 4);
  await jumpToEnd();
  const o = await outcomeNow();
  assert.equal(o.drain, 'ok');
  assert.deepEqual(o.stale, []);
  assert.doesNotMatch(await text('[data-testid=log]'), /session_expired/);
  assert.match(await text('[data-testid=caption-text]'), /A's session never expired: A was paused 4 s \(t=3–7\)/);
  // scene 5: a 5 s pause misses no keep-alive (heartbeats every 10 s): the woken W1 sends
  // its write and nothing else, and the caption says no keep-alive went out
  await open(5);
  await setSlider('pause', 5);
  const woke = (await page.evaluate(() => window.fencelockDemo.milestones)).find((m) => /^W1 sends/.test(m.label));
  assert.ok(woke, 'W1 wakes and sends its write');
  await scrubTo(woke.step);
  const cap = await text('[data-testid=caption-text]');
  assert.match(cap, /Its session never expired/);
  assert.doesNotMatch(cap, /keep-alive|extends the session/, 'a keep-alive that was not due was said to go out');
});

test('story mode is kept per scene: a story that ended leaves free play to its own scene only', async () => {
  await open(1);
  await walkStory();
  assert.equal(await page.locator('[data-testid=story]').isChecked(), false, 'scene 1 is in free play after its story');
  await page.keyboard.press('2');
  assert.equal(await page.locator('[data-testid=story]').isChecked(), true, 'scene 2 opens as a story');
  assert.equal(await page.getAttribute('body', 'data-story'), 'true');
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  await page.keyboard.press('Space');
  await page.waitForSelector('body[data-playing="false"]');
  assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), String(ms[1].step), `play stopped at "${ms[1].label}"`);
  await page.keyboard.press('1');
  assert.equal(await page.locator('[data-testid=story]').isChecked(), false, 'scene 1 keeps its free play');
});

test('the f key toggles the fencing switch only: in scene 8 (no such switch) it leaves the crash alone', async () => {
  await open(8);
  const before = (await page.evaluate(() => window.fencelockDemo.milestones)).map((m) => m.label);
  assert.ok(before.includes('worker-2 crashes'));
  await page.keyboard.press('f');
  assert.equal(await page.locator('[data-testid=param-crash]').isChecked(), true);
  assert.deepEqual((await page.evaluate(() => window.fencelockDemo.milestones)).map((m) => m.label), before);
  await open(3);
  await page.keyboard.press('f');
  assert.equal(await page.locator('[data-testid=param-fencing]').isChecked(), false, 'scene 3: f turns the epoch check off');
});

test('scene 4: every replica applies a log entry at the time the head stamped on it, not when it gets to it', async () => {
  await open(4);
  const sessions = (node) => page.evaluate((n) => window.fencelockDemo.inspect(n, 'jobs/reindex').sessions.map((x) => [x.id, x.expiresAt]), node);
  await scrubTo(3); // t=2: the replica (lag 2) has just applied the sessions opened at t=0
  const p = await sessions('P');
  assert.equal(p.length, 2);
  assert.deepEqual(await sessions('R'), p, 'the replica\'s deadlines are the primary\'s');
  await scrubTo(5); // t=4: N3 (lag 3) has applied them too
  const n1 = await sessions('N1');
  assert.equal(n1.length, 2);
  assert.deepEqual(await sessions('N2'), n1);
  assert.deepEqual(await sessions('N3'), n1);
  // (and the outcome counts its holders in good English)
  await jumpToEnd();
  assert.match(await text('[data-testid=outcome]'), /Single Redis: 2 holders \(A·1, B·1\) — the promoted replica does not list A·1 \(grant lost\) · Consensus: 1 holder \(A·1\)$/);
});

test('replay: a write with a token no recorded grant has given yet is the unknown writer\'s on every pass, as its caption says', async () => {
  const { Recorder } = await import('../src/recording.js');
  const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
  const svc = new api.LockService({ sessions: 4, locks: 2, claims: 4 });
  const gate = new api.FenceGate(4);
  const rec = new Recorder(svc, { source: 'an admit before the grant of its token' });
  const a = rec.handle({ kind: 'open_session', now: 0, ttl: 30 }).reply.session;
  rec.admit(gate, 1, 'out', 1); // token 1 from before the recording: no line has granted it yet
  rec.handle({ kind: 'acquire', now: 2, session: a, lock: 'x', mode: 'exclusive', wait: 'none' });
  rec.admit(gate, 3, 'out', 1);
  await open(1);
  await openRecording(rec.text(), 'early-admit.flrec');
  const writers = () => page.evaluate(() => (window.fencelockDemo.rows.store ?? []).map((r) => r.by));
  const length = await stepsOf();
  const passes = [];
  for (let k = 1; k <= length; k += 1) {
    await scrubTo(k);
    if (/no recorded grant gave it/.test(await text('[data-testid=caption-text]'))) assert.deepEqual(await writers(), ['unknown'], `step ${k}: the caption and the row name the same writer`);
    // a token nobody can place is not called stale; the holder's own write is current
    assert.equal(await page.locator('[data-testid=banner]').count(), 0, `step ${k}: no banner`);
    assert.equal(await page.getAttribute('[data-testid=store]', 'data-verdict'), 'clean', `step ${k}`);
  }
  passes.push(await writers());
  await page.keyboard.press('Home');
  await page.keyboard.press('End');
  passes.push(await writers());
  await scrubTo(2);
  await scrubTo(length);
  passes.push(await writers());
  assert.deepEqual(passes, [['unknown', 'S1'], ['unknown', 'S1'], ['unknown', 'S1']]);
  gate.free();
  svc.free();
});

test('accessibility: the caption and the live regions are written only when their text changes, a switch\'s off state is visible (3:1), the speed is spoken as a speed', async () => {
  await open(1);
  // an intervention, so the interventions note (role=status) has something to show
  await intervene('B', 'kill', await stepOf('B writes 35'));
  await page.keyboard.press('Home');
  await page.evaluate(() => {
    window.__writes = { caption: 0, 'caption-live': 0, interventions: 0 };
    for (const id of Object.keys(window.__writes)) {
      const o = new MutationObserver((records) => (window.__writes[id] += records.length));
      o.observe(document.getElementById(id), { childList: true, subtree: true, characterData: true });
    }
  });
  const html = () => page.evaluate(() => Object.fromEntries(['caption', 'caption-live', 'interventions'].map((id) => [id, document.getElementById(id).innerHTML])));
  const length = await stepsOf();
  let same = 0;
  let changed = 0;
  for (let k = 2; k <= length; k += 1) {
    const before = await html();
    await page.keyboard.press('ArrowRight');
    // (an observer's records are delivered by the time an evaluate returns)
    const writes = await page.evaluate(() => {
      const w = { ...window.__writes };
      for (const id of Object.keys(window.__writes)) window.__writes[id] = 0;
      return w;
    });
    const after = await html();
    for (const id of ['caption', 'caption-live', 'interventions']) {
      if (before[id] === after[id]) {
        same += 1;
        assert.equal(writes[id], 0, `step ${k}: #${id} was rewritten with the same text`);
      } else {
        changed += 1;
        assert.ok(writes[id] > 0, `step ${k}: #${id} changed`);
      }
    }
  }
  assert.ok(same > 0 && changed > 0, `both cases were met (${same} unchanged, ${changed} changed)`);
  // the switch, off: its track against the panel and its knob against the track, 3:1 at least
  await setSwitch('fencing', false);
  const [panel, knob] = await page.evaluate(`(() => { ${CONTRAST_FN}
    const track = document.querySelector('[data-testid=param-fencing] + .track');
    const bgOf = (el) => { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c && c.a > 0) return c; } return { r: 255, g: 255, b: 255, a: 1 }; };
    const t = rgb(getComputedStyle(track).backgroundColor);
    return [ratio(t, bgOf(track.parentElement)), ratio(t, rgb(getComputedStyle(track, '::after').backgroundColor))];
  })()`);
  assert.ok(panel >= 3, `off track against the panel: ${panel.toFixed(2)}:1`);
  assert.ok(knob >= 3, `knob against the off track: ${knob.toFixed(2)}:1`);
  // the speed slider is spoken as the speed it gives, not its log-scale number
  const speed = page.locator('[data-testid=speed]');
  await speed.fill('-2');
  assert.equal(await speed.getAttribute('aria-valuetext'), '0.25× speed');
  await speed.fill('3');
  assert.equal(await speed.getAttribute('aria-valuetext'), '8× speed');
});

test('scene 8 pictures: the moment the crashed holder\'s session expires, at 1280 and at 390 px', async () => {
  await open(8);
  await scrubTo((await page.evaluate(() => window.fencelockDemo.milestones)).find((m) => /session expires$/.test(m.label)).step);
  await page.evaluate(() => document.activeElement?.blur());
  await readmeShot('screenshot-permits.png');
  // a phone opens the scene afresh (its tab row scrolls the chosen tab into view)
  await open(8, { width: 390, height: 844 });
  await scrubTo((await page.evaluate(() => window.fencelockDemo.milestones)).find((m) => /session expires$/.test(m.label)).step);
  await page.evaluate(() => (window.scrollTo(0, 0), document.activeElement?.blur()));
  const over = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(over <= 0, `the phone layout overflows by ${over}px`);
  await readmeShot('screenshot-permits-phone.png');
  // the timeline's lane names (shorter on a phone) are whole
  const cut = await page.$$eval('[data-testid=swimlane] text.lane-label', (ts) => ts.filter((t) => t.getBBox().x < 0).map((t) => t.textContent));
  assert.deepEqual(cut, [], 'lane names cut off at the left');
  assert.equal(await page.locator('[data-testid=swimlane] text.lane-label').first().textContent(), 'Redis w1');
});

test('replay: a recording of a semaphore with labelled sessions and a watch shows the labels, the holders and what the watcher was told', async () => {
  const { Recorder } = await import('../src/recording.js');
  const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
  const svc = new api.LockService({ sessions: 8, locks: 4, claims: 16 });
  const rec = new Recorder(svc, { source: 'a semaphore of 2' });
  const openAs = (label) => rec.handle({ kind: 'open_labeled', now: 0, ttl: 5, label }).reply.session;
  const [a, b, c, dash] = ['worker-a (pid 1)', 'worker-b (pid 2)', 'worker-c (pid 3)', 'dashboard'].map(openAs);
  rec.handle({ kind: 'watch', now: 1, session: dash, lock: 'db/pool' });
  for (const s of [a, b, c]) rec.handle({ kind: 'acquire', now: 1, session: s, lock: 'db/pool', mode: { permits: 1, limit: 2 }, wait: 'forever' });
  for (const s of [b, c, dash]) rec.handle({ kind: 'keep_alive', now: 3, session: s });
  rec.handle({ kind: 'tick', now: 6 });
  svc.free?.();
  await open(1);
  await openRecording(rec.text(), 'semaphore.flrec');
  assert.equal(await page.getAttribute('body', 'data-recording'), 'open', await text('[data-testid=rec-error]').catch(() => ''));
  await scrubTo(2);
  assert.match(await text('[data-testid=caption-text]'), new RegExp(`session ${a} opens as "worker-a \\(pid 1\\)"`));
  await scrubTo(6);
  assert.match(await text('[data-testid=caption-text]'), new RegExp(`session ${dash} watches "db/pool" \\(0 holders now\\)`));
  await jumpToEnd();
  await page.click('[data-testid=step-back]'); // the tick's line
  const cap = await text('[data-testid=caption-text]');
  assert.match(cap, new RegExp(`session ${a} expired.*session ${dash}, watching "db/pool", is told: expired "worker-a \\(pid 1\\)" \\(token 1\\).*session ${c}, waiting, is granted "db/pool" with token 3.*is told: granted "worker-c \\(pid 3\\)" \\(token 3\\)`));
  assert.match(await page.locator('[data-testid=service]').textContent(), new RegExp(`S${b} · token 2, S${c} · token 3`));
  assert.match(await text('[data-testid=log]'), /holder_changed \{session: 4, lock: "db\/pool", holder: 1, mode: \{"permits":1,"limit":2\}, token: 1, change: "expired", label: "worker-a \(pid 1\)"\}/);
});

test('replay: a forced release of a named hold (release_hold lines) shows the old token refused and the named hold released', async () => {
  const { Recorder } = await import('../src/recording.js');
  const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
  const svc = new api.LockService({ sessions: 4, locks: 2, claims: 4 });
  const rec = new Recorder(svc, { source: 'a forced release', tickMs: 1 });
  const a = rec.handle({ kind: 'open_session', now: 0, ttl: 1000 }).reply.session;
  const b = rec.handle({ kind: 'open_session', now: 0, ttl: 1000 }).reply.session;
  rec.handle({ kind: 'acquire', now: 1, session: a, lock: 'jobs/x', mode: 'exclusive', wait: 'forever' }); // token 1
  rec.handle({ kind: 'release', now: 2, session: a, lock: 'jobs/x' });
  rec.handle({ kind: 'acquire', now: 3, session: a, lock: 'jobs/x', mode: 'exclusive', wait: 'forever' }); // token 2
  rec.handle({ kind: 'acquire', now: 3, session: b, lock: 'jobs/x', mode: 'exclusive', wait: 'forever' });
  // as a cluster's export writes a forced release: session, lock, token (line 8, then line 9)
  assert.throws(() => rec.handle({ kind: 'release_hold', now: 4, session: a, lock: 'jobs/x', token: 1 }), { code: 'not_holder' });
  rec.handle({ kind: 'release_hold', now: 5, session: a, lock: 'jobs/x', token: 2 });
  // a retry of it, once the hold is over and the session holds the lock no more (line 10)
  assert.throws(() => rec.handle({ kind: 'release_hold', now: 6, session: a, lock: 'jobs/x', token: 2 }), { code: 'not_holder' });
  svc.free?.();
  await open(1);
  await openRecording(rec.text(), 'forced.flrec');
  assert.equal(await page.getAttribute('body', 'data-recording'), 'open', await text('[data-testid=rec-error]').catch(() => ''));
  await scrubTo(8);
  assert.match(await text('[data-testid=caption-text]'), new RegExp(`line 8\\): session ${a}'s release_hold of "jobs/x" with token 1 is refused: not_holder \\(it holds "jobs/x" with token 2 now, a later hold, which stays\\)`));
  assert.match(await page.locator('[data-testid=service]').textContent(), new RegExp(`S${a} · token 2`), 'the later hold stays');
  assert.match(await text('[data-testid=log]'), /release_hold\(now: 4, session: 1, lock: "jobs\/x", token: 1\)/);
  await scrubTo(9);
  assert.match(await text('[data-testid=caption-text]'), new RegExp(`line 9\\): session ${a}'s hold of "jobs/x" with token 2 is released by its token \\(release_hold\\)\\. session ${b}, waiting, is granted "jobs/x" with token 3`));
  assert.match(await page.locator('[data-testid=service]').textContent(), new RegExp(`S${b} · token 3`));
  await scrubTo(10);
  assert.match(await text('[data-testid=caption-text]'), new RegExp(`line 10\\): session ${a}'s release_hold of "jobs/x" with token 2 is refused: not_holder \\(it does not hold "jobs/x"\\)`));
  const ms = await page.evaluate(() => window.fencelockDemo.milestones);
  assert.ok(ms.some((m) => m.label === 'release_hold ✗'), ms.map((m) => m.label).join(', '));
  assert.ok(ms.some((m) => m.label === `session ${b} gets 3`));
});

// ------------------------------------------------------------------ recordings judged by the core

test('replay: a recording that starts while a session holds the lock: its write is its own, a write with an ended hold\'s token is a stale write landed, a token nobody can place is unknown', async () => {
  const { Recorder } = await import('../src/recording.js');
  const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
  const svc = new api.LockService({ sessions: 4, locks: 4, claims: 8 });
  const gate = new api.FenceGate(4);
  // before the window: session a holds jobs/reindex with token 1 (the snapshot carries it)
  const a = svc.openSession(0, 30).reply.session;
  const held = svc.acquire(0, a, 'jobs/reindex', { mode: 'exclusive', wait: 'none' }).reply.token;
  const rec = new Recorder(svc, { source: 'a window that starts mid-hold' });
  // in the window another lock is named more often than the one a's write is guarded by
  const b = rec.handle({ kind: 'open_session', now: 1, ttl: 30 }).reply.session;
  for (let k = 0; k < 2; k += 1) {
    rec.handle({ kind: 'acquire', now: 2, session: b, lock: 'cache/warm', mode: 'exclusive', wait: 'none' });
    rec.handle({ kind: 'release', now: 2, session: b, lock: 'cache/warm' });
  }
  rec.handle({ kind: 'keep_alive', now: 3, session: a });
  rec.admit(gate, 4, 'out', held); // the holder writes with its own token
  rec.handle({ kind: 'keep_alive', now: 20, session: b });
  rec.handle({ kind: 'tick', now: 34 }); // a's session expires: its hold of token 1 ends
  rec.admit(gate, 35, 'out', held); // the same token, now that nobody holds it: stale
  rec.admit(gate, 36, 'other', 99); // a token no holder and no line of the window names
  const text_ = rec.text();
  gate.free();
  svc.free();
  await open(1);
  await openRecording(text_, 'mid-hold.flrec');
  assert.equal(await page.getAttribute('body', 'data-recording'), 'open', await text('[data-testid=rec-error]').catch(() => ''));
  const length = await stepsOf();
  const rowsNow = () => page.evaluate(() => window.fencelockDemo.rows);
  let seen = 0;
  for (let k = 1; k <= length; k += 1) {
    await scrubTo(k);
    const cap = await text('[data-testid=caption-text]');
    const rows = await rowsNow();
    const banner = (await page.locator('[data-testid=banner]').count()) ? await page.locator('[data-testid=banner]').textContent() : '';
    const verdict = await page.getAttribute('[data-testid=store]', 'data-verdict');
    // the scenes' meaning: never "corrupted" without a stale writer's data beside another's
    assert.notEqual(banner, 'DATA CORRUPTED', `step ${k}`);
    if (/line 8\)/.test(cap)) {
      // the core lists session a holding jobs/reindex with this token: its write, current
      seen += 1;
      assert.match(cap, new RegExp(`with token ${held} \\(session ${a}'s: the core lists it holding "jobs/reindex" with token ${held}\\) is accepted`));
      assert.deepEqual(rows.store.map((r) => [r.by, r.token, r.accepted, r.stale]), [[`S${a}`, held, true, false]]);
      assert.equal(verdict, 'clean', `step ${k}`);
      assert.equal(banner, '', `step ${k}`);
      assert.equal(await page.getAttribute(`[data-testid=accepted-${held}]`, 'class'), 'chip good');
    }
    if (/line 11\)/.test(cap)) {
      // the hold that token was ended (the recorded expiry): a write without the lock landed
      seen += 1;
      assert.match(cap, /is accepted: a stale write landed/);
      assert.deepEqual(rows.store.map((r) => [r.by, r.token, r.stale]), [[`S${a}`, held, false], [`S${a}`, held, true]]);
      assert.equal(verdict, 'stale', `step ${k}`);
      assert.equal(banner, 'STALE WRITE LANDED', `step ${k}`);
    }
    if (/line 12\)/.test(cap)) {
      // nothing places token 99: its writer is unknown, and it is not called stale
      seen += 1;
      assert.match(cap, /Its writer is unknown/);
      assert.deepEqual(rows['store:other'].map((r) => [r.by, r.token, r.accepted, r.stale, r.unknown]), [['unknown', 99, true, false, true]]);
      assert.match(await text('[data-testid=state]'), /99 \(writer unknown\)/);
    }
  }
  assert.equal(seen, 3, 'the three writes were each checked');
});

// ------------------------------------------------------------------ scene 7: what the run did

/** Scene 7's storage now: its rows in the order it took them, and what it holds. */
async function segmentsNow() {
  return page.evaluate(() => ({ rows: window.fencelockDemo.rows.store, contents: window.fencelockDemo.contents.store }));
}

test('scene 7: several writes in one tick — A\'s late write landed before B\'s first, and B then wrote over it; the ending says so, from the rows', async () => {
  for (const [delay, pause] of [[6, 11], [0, 5]]) {
    await open(7);
    await setSlider('delay', delay);
    await setSlider('pause', pause);
    await jumpToEnd();
    const { rows, contents } = await segmentsNow();
    const i = rows.findIndex((r) => r.stale);
    const late = rows[i];
    const bFirst = rows.findIndex((r) => r.by === 'B');
    assert.ok(i >= 0 && bFirst > i && rows[bFirst].t === late.t, `delay ${delay}, pause ${pause}: B's first write came after A's late one, in the same tick: ${JSON.stringify(rows)}`);
    const over = rows.slice(i + 1).find((r) => r.part === late.part);
    assert.equal(over.by, 'B');
    assert.deepEqual(Object.values(contents).map((c) => [c.by, c.stale]), [['B', false], ['B', false]], 'the storage ends with B\'s run only');
    const cap = await text('[data-testid=caption-text]');
    assert.ok(cap.includes(`A's late write landed at t=${late.t}`), cap);
    assert.ok(cap.includes('had not written yet: its first write came after A\'s, in the same tick'), cap);
    assert.ok(cap.includes(`B then wrote ${late.part} over it at t=${over.t}`), cap);
    assert.doesNotMatch(cap, /had started writing|stale segment in it|data is corrupted|it drained|Lock-delay helped/, cap);
    assert.equal(await page.getAttribute('[data-testid=store]', 'data-verdict'), 'stale');
    if (delay === 0) {
      assert.doesNotMatch(cap, /lock-delay ended/, cap);
      assert.match(cap, /With no lock-delay, B was granted the moment A expired/);
    }
  }
});

test('scene 7: B killed while it waits — no caption says B waits once the core\'s queue is empty, and the ending says B never wrote and the stale segment stays', async () => {
  await open(7);
  await intervene('B', 'kill', 6); // t=5: B is queued
  const length = await stepsOf();
  for (let k = 6; k <= length; k += 1) {
    await scrubTo(k);
    const cap = await text('[data-testid=caption-text]');
    const q = await page.evaluate(() => window.fencelockDemo.inspect('svc', 'jobs/compact'));
    if (/B is waiting/.test(cap)) assert.equal(q.waiters.length, 1, `step ${k}: the core queues B's session: ${cap}`);
    if (!q.waiters.length) assert.doesNotMatch(cap, /B is waiting/, `step ${k}: ${cap}`);
  }
  await scrubTo(await stepOf('B expires'));
  assert.match(await text('[data-testid=caption-text]'), /the service expires the session and drops it from the wait queue\. Nobody is waiting for it now/);
  await jumpToEnd();
  const { rows, contents } = await segmentsNow();
  assert.deepEqual(rows.filter((r) => r.by === 'B'), [], 'B never wrote');
  const late = rows.find((r) => r.stale);
  assert.deepEqual([contents[late.part].by, contents[late.part].stale], ['A', true], 'the storage keeps A\'s stale segment');
  const cap = await text('[data-testid=caption-text]');
  assert.match(cap, /B never wrote: B was killed at t=5/);
  assert.ok(cap.includes(`the storage still holds A's stale ${late.part}`), cap);
  assert.doesNotMatch(cap, /then wrote .* over it|Lock-delay helped/, cap);
  assert.equal(await page.getAttribute('[data-testid=outcome]', 'data-kind'), 'corrupted');
  assert.doesNotMatch(await text('[data-testid=outcome]'), /drained before B started/);
});

test('scene 7: no lock-delay and B paused the moment it is granted — the ending credits no lock-delay and says B never wrote', async () => {
  await open(7);
  await setSlider('delay', 0);
  await intervene('B', 'pause', await stepOf('B gets 2'));
  await jumpToEnd();
  const { rows, contents } = await segmentsNow();
  assert.deepEqual(rows.filter((r) => r.by === 'B'), []);
  const late = rows.find((r) => r.stale);
  assert.equal(contents[late.part].stale, true);
  const cap = await text('[data-testid=caption-text]');
  assert.match(cap, /B never wrote: B is paused \(since t=8/);
  assert.ok(cap.includes(`the storage still holds A's stale ${late.part}`), cap);
  assert.doesNotMatch(cap, /lock-delay ended|Lock-delay helped|it drained/, cap);
});

// ------------------------------------------------------------------ a write on the wire

test('a write already sent reaches the storage though its sender is killed or paused the moment after (scenes 1 and 5)', async () => {
  // scene 1, a 5 s pause: A wakes at t=7 with its session alive and sends its write
  await open(1);
  await setSlider('pause', 5);
  const sent = await stepOf('A sends 34');
  await intervene('A', 'kill', sent);
  await jumpToEnd();
  let rows = (await page.evaluate(() => window.fencelockDemo.rows)).store;
  assert.deepEqual(rows.filter((r) => r.by === 'A' && r.t > 7).map((r) => [r.t, r.token, r.accepted, r.stale]), [[8, 34, true, false]], 'the write on the wire landed after A was killed');
  let cap = await text('[data-testid=caption-text]');
  assert.doesNotMatch(cap, /never wrote again/, cap);
  assert.match(cap, /A was killed at t=7 after sending its write with 34, which landed at t=8/);
  // paused instead of killed: the write lands while A stays paused
  await page.click('[data-testid=reset]');
  await intervene('A', 'pause', sent);
  await scrubTo(sent + 1);
  rows = (await page.evaluate(() => window.fencelockDemo.rows)).store;
  assert.deepEqual(rows.filter((r) => r.by === 'A' && r.t > 7).map((r) => [r.t, r.token]), [[8, 34]]);
  assert.equal(await page.getAttribute('[data-testid=client-A]', 'data-status'), 'paused');
  assert.match(await text('[data-testid=caption-text]'), /A was paused after sending it, and the write arrived all the same/);
  // scene 5: W1, paused 20 s, wakes with its lease alive and sends its PUT; killed, it still lands
  await page.click('[data-testid=tab-5]');
  await setSlider('pause', 20);
  await intervene('W1', 'kill', await stepOf('W1 sends 42'));
  await jumpToEnd();
  rows = (await page.evaluate(() => window.fencelockDemo.rows)).store;
  assert.ok(rows.some((r) => r.by === 'W1' && r.token === 42 && r.t === 33 && r.accepted), JSON.stringify(rows));
});

// ------------------------------------------------------------------ the own clock's bound

test('a client\'s own clock says "safe until t=X", and only while the clock is before X (scenes 1 and 7, every step)', async () => {
  let safe = 0;
  for (const scene of [1, 7]) {
    await open(scene);
    const length = await stepsOf();
    for (let k = 1; k <= length; k += 1) {
      await scrubTo(k);
      const t = Number((await page.locator('[data-testid=clock]').textContent()).match(/t = (\d+)/)[1]);
      const leases = await page.locator('#stage .lease[data-clock="running"]').evaluateAll((ls) => ls.map((l) => [l.dataset.lease, l.textContent]));
      for (const [state, label] of leases) {
        if (state !== 'safe') continue;
        safe += 1;
        const m = label.match(/^own clock: safe until t=(\d+)$/);
        assert.ok(m, `scene ${scene}, step ${k}: "${label}"`);
        assert.ok(t < Number(m[1]), `scene ${scene}, step ${k}: safe at t=${t} though the lease ends at ${m[1]}`);
      }
    }
  }
  assert.ok(safe > 0, 'some lease was safe');
});

// ------------------------------------------------------------------ accessibility

test('accessibility: a recording\'s sessions are not offered as buttons, and the hint says they cannot be acted on', async () => {
  await open(1);
  assert.ok((await page.locator('#stage [data-client][role=button][tabindex="0"]').count()) > 0, 'a scene\'s clients are buttons');
  assert.match(await text('[data-testid=hint-clients]'), /Click a client/);
  await openRecording(sampleText());
  await jumpToEnd();
  const clients = await page.locator('#stage [data-client]').evaluateAll((gs) => gs.map((g) => ({ role: g.getAttribute('role'), tab: g.getAttribute('tabindex'), popup: g.getAttribute('aria-haspopup'), label: g.getAttribute('aria-label'), cursor: getComputedStyle(g).cursor })));
  assert.ok(clients.length > 0);
  for (const c of clients) assert.deepEqual(c, { role: null, tab: null, popup: null, label: null, cursor: 'auto' });
  assert.doesNotMatch(await text('[data-testid=hint-clients]'), /Click a client/);
  assert.match(await text('[data-testid=hint-clients]'), /cannot be paused, resumed or killed/);
});

test('accessibility: single-key shortcuts can be turned off (and stay off); the arrows still step', async () => {
  await open(1);
  await intervene('B', 'kill', await stepOf('B writes 35'));
  const toggle = page.locator('[data-testid=keys]');
  assert.equal(await toggle.isChecked(), true, 'on by default');
  await toggle.click();
  await page.evaluate(() => document.activeElement?.blur());
  const state = () => page.evaluate(() => ({ scene: window.fencelockDemo.scene, kept: window.fencelockDemo.interventions.length, story: document.querySelector('[data-testid=story]').checked, fencing: document.querySelector('[data-testid=param-fencing]').checked, playing: document.body.dataset.playing }));
  const before = await state();
  for (const key of ['r', '2', 's', 'f', 'Space', '?']) {
    await page.keyboard.press(key);
    assert.deepEqual(await state(), before, `"${key}" does nothing with single-key shortcuts off`);
    assert.equal(await page.evaluate(() => document.getElementById('help').open), false);
  }
  const step = Number(await page.getAttribute('[data-testid=clock]', 'data-step'));
  await page.keyboard.press('ArrowRight');
  assert.equal(await page.getAttribute('[data-testid=clock]', 'data-step'), String(step + 1), 'the arrows still step');
  // the page remembers the choice
  await page.reload();
  await page.waitForSelector('body[data-ready="1"]');
  assert.equal(await page.locator('[data-testid=keys]').isChecked(), false);
  await page.locator('[data-testid=keys]').click();
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.press('2');
  assert.equal(await page.evaluate(() => window.fencelockDemo.scene), 'herd', 'on again: the digits choose a scene');
});

test('accessibility: the message arrows move only while playing (and not at all with reduced motion)', async () => {
  // not in ?test mode, which turns every animation off
  await page.goto(`${BASE}?scene=1`);
  await page.waitForSelector('body[data-ready="1"]');
  await scrubTo(await stepOf('A sends 34'));
  const anim = () => page.locator('#stage .flash path').first().evaluate((p) => getComputedStyle(p).animationName);
  assert.ok((await page.locator('#stage .flash path').count()) > 0, 'an arrow is drawn');
  assert.equal(await page.getAttribute('body', 'data-playing'), 'false');
  assert.equal(await anim(), 'none', 'at a stop the arrows hold still');
  // the rule that moves them while playing (the page sets this attribute while it plays)
  await page.evaluate(() => (document.body.dataset.playing = 'true'));
  assert.equal(await anim(), 'flow');
  await page.emulateMedia({ reducedMotion: 'reduce' });
  assert.equal(await anim(), 'none');
});

test('accessibility: on a phone, focus on "Open a recording" is drawn on the visible control', async () => {
  await open(1, { width: 390, height: 844 });
  let reached = null;
  for (let k = 0; k < 80 && !reached; k += 1) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => {
      const el = document.activeElement;
      if (!(el instanceof HTMLInputElement) || el.type !== 'file') return null;
      const box = el.closest('label').getBoundingClientRect();
      return { id: el.id, w: box.width, h: box.height, outline: getComputedStyle(el.closest('label')).outlineStyle };
    });
  }
  assert.ok(reached, 'Tab reaches a file input');
  assert.equal(reached.id, 'rec-file-phone', 'the phone\'s own control, not the header\'s hidden one');
  assert.ok(reached.w >= 40 && reached.h >= 24, `its label is visible: ${reached.w}×${reached.h}`);
  assert.notEqual(reached.outline, 'none', 'and draws the focus ring');
  // it opens a recording
  await page.setInputFiles('[data-testid=rec-file-phone]', SAMPLE);
  await page.waitForFunction(() => document.body.dataset.recording === 'open');
});

test('accessibility: each scene tab\'s accessible name starts with the text it shows (1280 and 390 px)', async () => {
  for (const size of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    await open(1, size);
    const tabs = await page.locator('[data-testid=scene-tabs] button').evaluateAll((bs) => bs.map((b) => ({ shown: b.innerText.replace(/\s+/g, ' ').trim(), name: (b.getAttribute('aria-label') ?? b.textContent).replace(/\s+/g, ' ').trim() })));
    assert.equal(tabs.length, SCENE_COUNT);
    for (const t of tabs) assert.ok(t.name.startsWith(t.shown), `${size.width} px: "${t.name}" starts with "${t.shown}"`);
  }
  // a voice command naming what is on screen reaches the tab
  await open(1);
  await page.getByRole('button', { name: 'Replication' }).click();
  assert.equal(await page.evaluate(() => window.fencelockDemo.scene), 'replication');
});

test('accessibility: while playing, a screen reader is told the milestones only, and where playback stopped', async () => {
  await open(1);
  assert.equal(await page.getAttribute('[data-testid=caption]', 'aria-live'), null, 'the caption itself is not a live region');
  assert.equal(await page.getAttribute('[data-testid=caption-live]', 'role'), 'status');
  await page.evaluate(() => {
    window.__said = [];
    window.__captions = 0;
    new MutationObserver(() => window.__said.push(document.getElementById('caption-live').textContent)).observe(document.getElementById('caption-live'), { childList: true, subtree: true, characterData: true });
    new MutationObserver((rs) => (window.__captions += rs.length)).observe(document.getElementById('caption'), { childList: true, subtree: true, characterData: true });
  });
  await playToEnd();
  const { said, captions } = await page.evaluate(() => ({ said: window.__said, captions: window.__captions }));
  const ms = (await page.evaluate(() => window.fencelockDemo.milestones)).filter((m) => !m.yours);
  assert.ok(said.length >= 2 && said.length <= ms.length, `${said.length} announcements for ${ms.length} milestones`);
  for (const s of said) assert.match(s, /^(Milestone \d+|Outcome): /, s);
  assert.ok(captions > said.length * 2, `the caption changed ${captions} times, ${said.length} announced`);
  assert.ok(said.at(-1).endsWith(await text('[data-testid=caption-text]')), 'the last announcement is where playback stopped');
});
