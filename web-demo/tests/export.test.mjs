// A real incident, exported and replayed: a three-node cluster of real `fencelock-node`
// processes on 127.0.0.1-3 (scripts/cluster.sh: TLS, an admin token), clients of the
// `fencelock` CLI contending for one lock, a holder stopped with SIGSTOP until its session
// expires and the next waiter is granted a newer token (the stale-holder moment), then
// an administrator's forced release of another lock's holder (a `release_hold` line), then
// kill -9 of the leader and more contention under the new one. `fencelock export` writes
// the cluster's history as a recording; the test checks it against what the clients saw,
// replays it in node with the real wasm core, then opens it in the demo page in headless
// Chromium and scrubs through it: the same number of steps, and at each visited step the
// holder and token on screen are the ones the recording says, with no error.
//
// Run by scripts/test-demo.sh, which sets DEMO_URL and FENCELOCK_BIN (the directory of the
// server binaries).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import net from 'node:net';
import path from 'node:path';
import { parseRecording, verifyRecording } from '../src/recording.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const require = createRequire(path.join(root, 'tools', 'package.json'));
const { chromium } = require('playwright-core');

const BASE = process.env.DEMO_URL;
const BIN = process.env.FENCELOCK_BIN;
if (!BASE || !BIN) throw new Error('DEMO_URL or FENCELOCK_BIN is not set: run scripts/test-demo.sh');
const LOCK = 'jobs/reindex';
/** The lock an administrator forces a holder off. */
const FORCED = 'jobs/forced';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let dir;
let env;
let pids = [];
let browser;
let running = true; // the workers' loop; false ends it (also when a check fails)
let stale; // the holder that is stopped
let forcedToken; // the token of the hold forced out

/** A base port whose six ports (BASE+i, BASE+100+i on 127.0.0.i) are free, below the ephemeral range. */
async function freeBase() {
  const free = (host, port) => new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, host, () => s.close(() => resolve(true)));
  });
  for (let k = 0; k < 50; k += 1) {
    const b = 20000 + Math.floor(Math.random() * 11800);
    let ok = true;
    for (const i of [1, 2, 3]) for (const p of [b + i, b + 100 + i]) ok = ok && (await free(`127.0.0.${i}`, p));
    if (ok) return b;
  }
  throw new Error('no free loopback ports');
}

/** Runs the CLI to the end: {code, out, err}. */
function cli(args, { timeout = 30000 } = {}) {
  return new Promise((resolve) => {
    const p = spawn(path.join(BIN, 'fencelock'), args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    const t = setTimeout(() => p.kill('SIGKILL'), timeout);
    p.on('close', (code, signal) => {
      clearTimeout(t);
      resolve({ code, signal, out, err });
    });
  });
}

/** Tokens the clients were given ("holding LOCK with token N" on stderr). */
const seen = [];
function noteTokens(err) {
  for (const m of err.matchAll(/holding (\S+) with token (\d+)/g)) if (m[1] === LOCK) seen.push(Number(m[2]));
}

/** A worker: take the lock (waiting), hold it briefly, release; again until `until()` is false. */
async function worker(until) {
  while (until()) {
    const r = await cli(['--ttl-ms', '3000', 'lock', LOCK, '--wait-ms', '15000', '--', 'sleep', '0.05']);
    noteTokens(r.err);
    if (r.code !== 0) await sleep(100); // a lease lost in the leader change, a timeout: try again
  }
}

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'fencelock-export-'));
  const base = await freeBase();
  const up = spawnSync(path.join(root, 'scripts', 'cluster.sh'), [], {
    env: { ...process.env, CLUSTER_DIR: dir, CLUSTER_DETACH: '1', CLUSTER_BASE_PORT: String(base), CLUSTER_PROFILE: 'debug' },
    encoding: 'utf8',
    timeout: 120000,
  });
  if (existsSync(path.join(dir, 'pids'))) pids = readFileSync(path.join(dir, 'pids'), 'utf8').trim().split('\n').map(Number);
  assert.equal(up.status, 0, `scripts/cluster.sh failed: ${up.stderr}`);
  env = {
    ...process.env,
    FENCELOCK_CLUSTER: [1, 2, 3].map((i) => `127.0.0.${i}:${base + i}`).join(','),
    FENCELOCK_AUTH_TOKEN_FILE: path.join(dir, 'admin.token'),
    FENCELOCK_TLS_CA: path.join(dir, 'tls', 'ca.pem'),
  };
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  running = false;
  try {
    stale?.kill('SIGKILL');
  } catch {
    // gone
  }
  await browser?.close();
  for (const p of pids) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // already gone (the killed leader)
    }
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The holder of LOCK after each recorded line, from the recording alone: [{session, token} | null]. */
function holdersByLine(entries) {
  let h = null;
  return entries.map((e) => {
    const r = e.reply;
    if (e.input.lock === LOCK && r?.kind === 'granted') h = { session: e.input.session, token: r.token };
    if (e.input.lock === LOCK && (r?.kind === 'released' || r?.kind === 'hold_ended') && h?.token === r.token) h = null;
    for (const ev of e.events) {
      if (ev.lock !== LOCK) continue;
      if (ev.kind === 'granted') h = { session: ev.session, token: ev.token };
      if (ev.kind === 'released' && h?.token === ev.token) h = null;
    }
    return h;
  });
}

/** Every grant of LOCK in the recording: {i (entry), session, token}. */
function grantsOf(entries) {
  const out = [];
  entries.forEach((e, i) => {
    if (e.input.lock === LOCK && e.reply?.kind === 'granted') out.push({ i, session: e.input.session, token: e.reply.token });
    for (const ev of e.events) if (ev.lock === LOCK && ev.kind === 'granted') out.push({ i, session: ev.session, token: ev.token });
  });
  return out;
}

test('a real three-node incident (stopped holder, kill -9 of the leader) exported with `fencelock export` replays in the page with the grants and tokens the clients saw', async () => {
  // 1. contention: three workers, and a holder that is stopped while it holds the lock
  const workers = [0, 1, 2].map(() => worker(() => running));
  stale = spawn(path.join(BIN, 'fencelock'), ['--ttl-ms', '1500', 'lock', LOCK, '--wait-ms', '15000', '--', 'sleep', '30'], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let staleErr = '';
  stale.stderr.on('data', (d) => (staleErr += d));
  const staleDone = new Promise((r) => stale.on('close', (code) => r(code)));
  for (let k = 0; k < 300 && !/holding \S+ with token \d+\n/.test(staleErr); k += 1) await sleep(50);
  const staleToken = Number(staleErr.match(/holding \S+ with token (\d+)/)?.[1]);
  assert.ok(staleToken > 0, `the stopped holder got the lock: ${staleErr}`);
  process.kill(stale.pid, 'SIGSTOP'); // no keep-alives: its session expires, a waiter gets a newer token
  for (let k = 0; k < 200 && !seen.some((t) => t > staleToken); k += 1) await sleep(50);
  assert.ok(seen.some((t) => t > staleToken), `a worker was granted a token after ${staleToken} (saw ${seen})`);
  process.kill(stale.pid, 'SIGCONT'); // it wakes believing it holds the lock; its lease check stops the command
  assert.equal(await staleDone, 3, `the woken holder exits 3 (lease lost): ${staleErr}`);

  // an administrator forces a holder of another lock out: the release names the hold by
  // its token, and the recording has it as a `release_hold` line the core answered
  const forced = spawn(path.join(BIN, 'fencelock'), ['--ttl-ms', '3000', 'lock', FORCED, '--', 'sleep', '30'], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let forcedErr = '';
  forced.stderr.on('data', (d) => (forcedErr += d));
  const forcedDone = new Promise((r) => forced.on('close', (code) => r(code)));
  for (let k = 0; k < 300 && !/holding \S+ with token \d+\n/.test(forcedErr); k += 1) await sleep(50);
  forcedToken = Number(forcedErr.match(/holding \S+ with token (\d+)/)?.[1]);
  assert.ok(forcedToken > 0, `the holder got ${FORCED}: ${forcedErr}`);
  const holder = await cli(['holder', FORCED]);
  assert.equal(holder.code, 0, holder.err);
  const [forcedSession, , heldToken] = holder.out.trim().split(' ');
  assert.equal(Number(heldToken), forcedToken, holder.out);
  const fr = await cli(['force-release', forcedSession, FORCED]);
  assert.equal(fr.code, 0, fr.err);
  assert.equal(await forcedDone, 3, `the forced-out holder exits 3: ${forcedErr}`);

  // 2. kill -9 the leader (the export names it), then more contention under the new one
  const first = await cli(['export', '-o', path.join(dir, 'before.flrec')]);
  assert.equal(first.code, 0, first.err);
  const leader = Number(first.err.match(/from node (\d+), the leader/)?.[1]);
  assert.ok(leader >= 1 && leader <= 3, first.err);
  process.kill(pids[leader - 1], 'SIGKILL');
  const before = seen.length;
  // enough of them that the recording is larger than one page of the export (40 KiB)
  for (let k = 0; k < 1200 && seen.length < before + 75; k += 1) await sleep(50);
  assert.ok(seen.length >= before + 3, `grants continue under the new leader (saw ${seen.slice(before)})`);
  running = false;
  await Promise.all(workers);

  // 3. export: the new leader's whole history
  const file = path.join(dir, 'incident.flrec');
  const ex = await cli(['export', '-o', file]);
  assert.equal(ex.code, 0, ex.err);
  const now = Number(ex.err.match(/from node (\d+), the leader/)?.[1]);
  assert.notEqual(now, leader, 'the export came from the new leader');
  const text = readFileSync(file, 'utf8');
  const rec = parseRecording(text);
  console.log(`exported: ${rec.entries.length + 2} lines (the header and end line among them), ${text.length} bytes; ${ex.err.trim()}`);
  assert.ok(text.length > 40 * 1024, `the recording (${text.length} bytes) came in more than one page`);
  const grants = grantsOf(rec.entries);
  const tokens = grants.map((g) => g.token);
  assert.deepEqual([...tokens].sort((a, b) => a - b), tokens, 'grants of the lock in token order');
  // a token goes to one session only (a retried acquire, after the leader was lost, is
  // answered again with the same grant: the core's replay of the session's last request)
  const owner = new Map();
  for (const g of grants) {
    assert.equal(owner.get(g.token) ?? g.session, g.session, `token ${g.token} granted to one session`);
    owner.set(g.token, g.session);
  }
  for (const t of seen) assert.ok(tokens.includes(t), `the recording has the grant of token ${t} a client saw`);
  // the forced release: the core's release of the hold of that token
  const byToken = rec.entries.filter((e) => e.input.kind === 'release_hold');
  assert.equal(byToken.length, 1, 'one forced release');
  assert.equal(byToken[0].input.lock, FORCED);
  assert.equal(byToken[0].input.token, forcedToken);
  assert.deepEqual(byToken[0].reply, { kind: 'released', token: forcedToken });
  // the stale-holder moment: the stopped holder's hold is released by its expiry, the next grant is newer
  const expired = rec.entries.findIndex((e) => e.events.some((ev) => ev.kind === 'released' && ev.lock === LOCK && ev.token === staleToken && ev.reason === 'expired'));
  assert.ok(expired >= 0, `the recording shows token ${staleToken}'s hold ending by expiry`);
  const next = grants.find((g) => g.token > staleToken);
  assert.ok(next && next.i >= expired, 'the next grant comes at or after the expiry');
  // the first export is a prefix of this one (same history, same lines; each ends in its
  // own end line, counting its own lines)
  const earlier = readFileSync(path.join(dir, 'before.flrec'), 'utf8').trim().split('\n');
  assert.deepEqual(text.split('\n').slice(1, earlier.length - 1), earlier.slice(1, -1), 'the history before the kill is the same from either leader');
  // the real core agrees with every line (in node)
  const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
  verifyRecording(api, text);
  // its ticks are the cluster's logical milliseconds, and the header says so
  assert.equal(rec.header.tick_ms, 1, 'the header says a tick is 1 ms');
  assert.equal(rec.tickMs, 1);

  // bounded exports: a window by log index and one by logical time are slices of the whole,
  // each starting from the state just before it (the core agrees with every line); a window
  // past the end is refused, saying what can be exported
  const [i0, i1] = ex.err.match(/log indices (\d+) to (\d+)/).slice(1).map(Number);
  const lo = i0 + Math.floor((i1 - i0) / 3);
  const hi = i0 + Math.floor((2 * (i1 - i0)) / 3);
  const inputs = (t) => t.trim().split('\n').slice(1, -1); // less the header and the end line
  const whole = inputs(text);
  const slice = (t) => {
    const part = inputs(t);
    const k = whole.indexOf(part[0]);
    assert.ok(k >= 0 && part.length > 0, 'the window\'s first line is one of the whole');
    assert.deepEqual(whole.slice(k, k + part.length), part, 'the window is a slice of the whole');
    verifyRecording(api, t);
    return part.map((l) => JSON.parse(l.split('\t')[0]));
  };
  const byIndex = await cli(['export', '--from-index', String(lo), '--to-index', String(hi)]);
  assert.equal(byIndex.code, 0, byIndex.err);
  const [j0, j1] = byIndex.err.match(/log indices (\d+) to (\d+)/).slice(1).map(Number);
  assert.ok(j0 >= lo && j1 <= hi, byIndex.err);
  slice(byIndex.out);
  const times = rec.entries.map((e) => e.now);
  const [t0, t1] = [times[Math.floor(times.length / 3)], times[Math.floor((2 * times.length) / 3)]];
  const byTime = await cli(['export', '--from-time', String(t0), '--to-time', String(t1)]);
  assert.equal(byTime.code, 0, byTime.err);
  const lines = slice(byTime.out);
  assert.ok(lines.every((l) => l.now >= t0 && l.now <= t1), `every line between ${t0} and ${t1}`);
  assert.equal(lines.length, times.filter((t) => t >= t0 && t <= t1).length, 'and every line of the whole in that time');
  const past = await cli(['export', '--from-index', '99999999']);
  assert.equal(past.code, 1);
  assert.match(past.err, /nothing to export from log index 99999999 to \d+: this leader can export log indices 1 to \d+/);

  // 4. the page: open it, scrub, compare with the recording
  mkdirSync(path.join(root, 'web-demo', 'test-output'), { recursive: true });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const problems = [];
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto(`${BASE}?test&scene=1`);
  await page.waitForSelector('body[data-ready="1"]');
  await page.setInputFiles('[data-testid=rec-file]', { name: 'incident.flrec', mimeType: 'text/plain', buffer: Buffer.from(text) });
  await page.waitForSelector('body[data-recording]', { state: 'attached' });
  assert.equal(await page.getAttribute('body', 'data-recording'), 'open', await page.locator('[data-testid=rec-error]').innerText().catch(() => ''));
  const n = rec.entries.length;
  // one step per recorded line, plus the restored start and the end
  assert.equal(Number(await page.getAttribute('[data-testid=clock]', 'data-length')), n + 2);
  const holders = holdersByLine(rec.entries);
  const scrubTo = async (step) => {
    await page.locator('[data-testid=scrubber]').fill(String(step));
    await page.waitForFunction((s) => document.querySelector('[data-testid=clock]').dataset.step === String(s), step);
  };
  const service = () => page.locator('[data-testid=service]').textContent();
  // the grants: the first, the one after the expiry, the first under the new leader, the last
  const afterKill = grants.find((g) => g.token > Math.max(...seen.slice(0, before)));
  const visits = [grants[0], next, afterKill, grants.at(-1)].filter(Boolean);
  for (const g of visits) {
    await scrubTo(g.i + 2); // step 1 is the restored start, entry i is step i + 2
    const caption = await page.locator('[data-testid=caption-text]').innerText();
    assert.match(caption, new RegExp(`session ${g.session}.* granted "jobs\\/reindex" with token ${g.token}(?!\\d)`), `step ${g.i + 2}`);
    const h = holders[g.i];
    assert.match(await service(), new RegExp(`(S|session )${h.session} · token ${h.token}(?!\\d)`), `holder at step ${g.i + 2}: the recording says ${JSON.stringify(h)}`);
  }
  // and a few steps between grants: the holder shown (or "free") is the recording's
  for (const i of [1, Math.floor(n / 3), expired, Math.floor((2 * n) / 3), n - 1]) {
    await scrubTo(i + 2);
    const h = holders[i];
    const box = await service();
    if (h) assert.match(box, new RegExp(`(S|session )${h.session} · token ${h.token}(?!\\d)`), `holder at step ${i + 2}: the recording says ${JSON.stringify(h)}`);
    else assert.match(box, /holder\s*free/, `no holder at step ${i + 2}: ${box}`);
  }
  // the workers queue behind each other (most join at #2 or #3, then move up): at the first
  // twenty steps, each waiter's bar on the timeline gives the place the stage gives, the
  // core's queue position now, not the one it joined at
  let queuedSeen = 0;
  for (let k = 2; k <= Math.min(n + 1, 21); k += 1) {
    await scrubTo(k);
    const pairs = await page.evaluate(() =>
      [...document.querySelectorAll('#stage [data-client]')]
        .filter((g) => g.dataset.badge.startsWith('queued'))
        .map((g) => [g.dataset.client, g.dataset.badge, document.querySelector(`[data-testid=swimlane] g.span.wait[data-lane="${g.dataset.client}"][data-open]`)?.dataset.label ?? null]),
    );
    for (const [id, badge, bar] of pairs) assert.equal(bar, badge, `step ${k}: ${id}'s queue bar says what the stage says`);
    queuedSeen += pairs.length;
  }
  assert.ok(queuedSeen > 0, 'some waiter was queued in the first steps');
  // times are shown in the cluster's unit: at the grant after the expiry the clock and the
  // caption give the milliseconds since the first line (as "N ms", or "N.NNN s" from a
  // second on), exactly; the caption keeps the line's own now
  const asTime = (ms) => (ms < 1000 ? `${ms} ms` : `${ms / 1000} s`);
  await scrubTo(next.i + 2);
  const since = rec.entries[next.i].now - rec.entries[0].now;
  assert.equal((await page.locator('[data-testid=clock]').innerText()).replace(/\s+/g, ' ').trim(), `t = ${asTime(since)}`);
  assert.ok((await page.locator('[data-testid=caption-text]').innerText()).startsWith(`t=${asTime(since)} (now ${rec.entries[next.i].now}, line ${next.i + 2}): `));
  // a picture of the stale-holder moment, for a person to look at (web-demo/test-output/)
  await page.screenshot({ path: path.join(root, 'web-demo', 'test-output', 'export-incident.png'), fullPage: true });
  await page.click('[data-testid=end]');
  await page.waitForSelector('body[data-at-end="true"]');
  assert.match(await page.locator('[data-testid=caption-text]').innerText(), new RegExp(`End of the recording: ${n} lines replayed into a fresh core, every answer the same as recorded`));
  // at the end the timeline's axis spans the incident in real time (it lasted seconds, not
  // hundreds of thousands of them): its labels are ms or s, the last one within the run
  const total = rec.entries.at(-1).now - rec.entries[0].now;
  const labels = await page.$$eval('[data-testid=swimlane] text.tick', (ts) => ts.map((t) => t.textContent));
  const labelMs = (l) => (l === '0' ? 0 : l.endsWith('ms') ? Number(l.slice(0, -2)) : Number(l.slice(0, -1)) * 1000);
  assert.ok(labels.length >= 2 && labels.every((l) => /^(0|\d+ms|\d+(\.\d+)?s)$/.test(l)), labels.join(' '));
  const lastLabel = Math.max(...labels.map(labelMs));
  assert.ok(lastLabel <= total && lastLabel >= total / 2, `the axis ends at ${lastLabel} ms of a ${total} ms run: ${labels.join(' ')}`);
  assert.equal((await page.locator('[data-testid=clock]').innerText()).replace(/\s+/g, ' ').trim(), `t = ${asTime(total)}`);
  await page.close();
  assert.deepEqual(problems, [], 'no console errors');
});
