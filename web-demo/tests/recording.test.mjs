// The recording format without a browser: the Recorder over the node build of the wasm core
// (wasm/pkg/node) writes what verifyRecording replays, and every kind of damage or lie in a
// file is refused with the line it is on; and the page's model of a replayed recording
// (scenes/replay.js through world.js, what render.js draws) ends waits and captions writes
// as the core and the fence decided. Run by scripts/test-demo.sh.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Recorder, verifyRecording, parseRecording, RecordingError, crc32, utf8Length, LIMITS, DEFAULT_TICK_MS } from '../src/recording.js';
import { fmtTime, fmtTimeLong, axisTicks, ticksFor } from '../src/units.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const api = createRequire(import.meta.url)(path.join(root, 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));
const SAMPLE = path.join(root, 'web-demo', 'recordings', 'paused-holder.flrec');

/** A small recording: two sessions, a grant, a queue, an expiry with a grant, a refusal. */
function small() {
  const svc = new api.LockService({ sessions: 4, locks: 2, claims: 4 });
  const gate = new api.FenceGate(2);
  const rec = new Recorder(svc, { source: 'test' });
  const a = rec.handle({ kind: 'open_session', now: 0, ttl: 5 }).reply.session;
  const b = rec.handle({ kind: 'open_session', now: 0, ttl: 50 }).reply.session;
  rec.handle({ kind: 'acquire', now: 1, session: a, lock: 'x', mode: 'exclusive', wait: 'forever' });
  rec.handle({ kind: 'acquire', now: 1, session: b, lock: 'x', mode: 'exclusive', wait: 'forever' });
  rec.admit(gate, 2, 'r', 1);
  rec.handle({ kind: 'tick', now: 6 });
  rec.admit(gate, 7, 'r', 2);
  rec.admit(gate, 8, 'r', 1);
  assert.throws(() => rec.handle({ kind: 'keep_alive', now: 9, session: a }), { code: 'unknown_session' });
  return rec.text();
}

/** `text` with line `n` (1-based) replaced by `f(json)`, its checksum recomputed (a lie, not damage). */
function lie(text, n, f) {
  const rows = text.split('\n');
  const body = f(rows[n - 1].split('\t')[0]);
  rows[n - 1] = `${body}\t${crc32(body)}`;
  return rows.join('\n');
}

const refuses = (text, line, re) =>
  assert.throws(() => verifyRecording(api, text), (e) => e instanceof RecordingError && e.line === line && re.test(e.reason), `line ${line} ${re}`);

test('a recording written by the Recorder replays line by line into a fresh core', () => {
  const text = small();
  const rec = verifyRecording(api, text);
  assert.equal(rec.entries.length, 9);
  // the tick's events, as the core gave them: the expiry, the release, the waiter's grant
  const tick = rec.entries.find((e) => e.input?.kind === 'tick');
  assert.deepEqual(tick.events.map((e) => e.kind), ['session_expired', 'released', 'granted']);
  assert.equal(rec.entries.at(-2).result, 'stale');
  assert.equal(rec.entries.at(-1).error, 'unknown_session');
});

test('the committed sample is what make-sample.mjs writes today, and it replays', () => {
  const committed = readFileSync(SAMPLE, 'utf8');
  verifyRecording(api, committed);
  // printed, not written: the committed file is the reference and is never touched here
  const today = execFileSync(process.execPath, [path.join(root, 'web-demo', 'recordings', 'make-sample.mjs'), '--stdout'], { encoding: 'utf8', maxBuffer: 1 << 24 });
  assert.equal(today, committed, 'regenerate the sample (node web-demo/recordings/make-sample.mjs) and commit it');
});

test('damage is found by the checksum of the line it is on', () => {
  const text = small();
  refuses(text.replace('"token":1', '"token":4'), 4, /checksum mismatch/);
  refuses(text.replace(/\t[0-9a-f]{8}\n/, '\n'), 1, /no checksum/);
  const rows = text.split('\n');
  rows[2] = rows[2].slice(0, 20);
  refuses(rows.join('\n'), 3, /no checksum/);
});

test('a recording cut short at a line break, or with lines added, is refused at its end line; one of version 1 has none', () => {
  const text = small();
  const rows = text.trim().split('\n');
  const n = rows.length;
  assert.equal(rows[n - 1].split('\t')[0], `{"end":{"lines":${n - 1}}}`);
  // cut after any whole line: the last line read is not the end line
  for (const keep of [1, 2, n - 1]) {
    refuses(`${rows.slice(0, keep).join('\n')}\n`, keep, /not the end line .*cut short/);
  }
  // a line lost in the middle (or one repeated), the end line kept: the count differs
  const lost = [...rows.slice(0, 3), ...rows.slice(4)].join('\n');
  refuses(lost, n - 1, new RegExp(`counts ${n - 1} lines before it, the file has ${n - 2}`));
  const twice = [...rows.slice(0, 3), rows[2], ...rows.slice(3)].join('\n');
  refuses(twice, n + 1, new RegExp(`counts ${n - 1} lines before it, the file has ${n}`));
  // an end line anywhere else, or with more in it, is refused
  refuses([...rows.slice(0, 2), rows[n - 1], ...rows.slice(2)].join('\n'), n + 1, /counts/);
  refuses(lie(text, n, (j) => j.replace('}}', ',"bytes":1}}')), n, /the end line has an unknown field "bytes"/);
  refuses(lie(text, n, (j) => j.replace('}}', '},"more":1}')), n, /the end line has an unknown field "more"/);
  const early = [rows[0], rows[n - 1], ...rows.slice(1)].join('\n');
  refuses(lie(early, n + 1, (j) => j.replace(`"lines":${n - 1}`, `"lines":${n}`)), 2, /an end line before the last line/);
  // version 1 (written before the end line): read without one, and refused with one
  const v1 = lie(rows.slice(0, n - 1).join('\n'), 1, (j) => j.replace('"version":2', '"version":1'));
  assert.equal(verifyRecording(api, v1).entries.length, n - 2);
  refuses(lie(text, 1, (j) => j.replace('"version":2', '"version":1')), n, /an end line in a recording of version 1/);
});

test('a line whose answer differs from the core\'s is refused with the line and both answers', () => {
  const text = small();
  refuses(lie(text, 4, (b) => b.replace('"token":1', '"token":4')), 4, /the core answers \{"kind":"granted","mode":"exclusive","token":1\}, the recording says .*"token":4/);
  refuses(lie(text, 7, (b) => b.replace(',{"kind":"granted"', ',{"kind":"granted","x":1').replace('"token":2}]', '"token":2}]')), 7, /the events differ/);
  refuses(lie(text, 8, (b) => b.replace('"accepted"', '"stale"')), 8, /the fence says accepted for token 2/);
  refuses(lie(text, 10, (b) => b.replace('"unknown_session"', '"stale_request"')), 10, /refuses with unknown_session, the recording says stale_request/);
});

test('shapes, order and the header are checked before anything is applied', () => {
  const text = small();
  refuses(lie(text, 1, (b) => b.replace('"fencelock-recording"', '"something-else"')), 1, /not a fencelock recording/);
  refuses(lie(text, 1, (b) => b.replace('"version":2', '"version":3')), 1, /version 3 is not supported/);
  refuses(lie(text, 1, (b) => b.replace(/"snapshot":"[0-9a-f]+"/, '"snapshot":"zz"')), 1, /snapshot is not hex/);
  refuses(lie(text, 1, (b) => b.replace(/"snapshot":"[0-9a-f]+"/, '"snapshot":"00ff"')), 1, /refuses the starting snapshot/);
  refuses(lie(text, 1, (b) => b.replace('"lockDelay":0', '"lockDelay":3')), 1, /lockDelay is 0, the header says 3/);
  refuses(lie(text, 7, (b) => b.replaceAll('"now":6', '"now":0')), 7, /"now" goes back/);
  refuses(lie(text, 3, (b) => b.replace('"ttl":50', '"ttl":50,"extra":1').replace('"events"', '"more":1,"events"')), 3, /unknown field "more"/);
  refuses(lie(text, 3, (b) => b.replace('"open_session"', '"explode"')), 3, /unknown input "explode"/);
  refuses(lie(text, 3, () => '[1,2]'), 3, /not a JSON object/);
  refuses(lie(text, 3, () => '{"now":'), 3, /not JSON/);
  refuses('', 1, /empty/);
  assert.throws(() => parseRecording('x'.repeat(LIMITS.bytes + 1)), /larger than/);
  // The limits count UTF-8 bytes, as the format and the server's export do, not UTF-16
  // units: 'é' is one unit and two bytes, '😀' two units and four bytes.
  assert.throws(() => parseRecording('é'.repeat(LIMITS.bytes / 2 + 1)), /larger than .* bytes/);
  refuses('é'.repeat(LIMITS.lineBytes / 2 + 1), 1, /longer than 16384 bytes/);
  refuses('x'.repeat(LIMITS.lineBytes + 1), 1, /longer than 16384 bytes/);
  // A line of exactly the limit passes the length check (and is refused for what follows).
  refuses('é'.repeat(LIMITS.lineBytes / 2), 1, /no checksum/);
  assert.equal(utf8Length('aé€😀'), 1 + 2 + 3 + 4);
  assert.equal(utf8Length('\ud800x'), 3 + 1, 'a lone surrogate counts as U+FFFD');
  assert.equal(utf8Length('é€😀'), new TextEncoder().encode('é€😀').length);
});

test('the Recorder refuses a bigint before applying it, and records a core refusal with its events', () => {
  const svc = new api.LockService({ sessions: 2, locks: 1, claims: 2 });
  const rec = new Recorder(svc);
  assert.throws(() => rec.handle({ kind: 'tick', now: 2n ** 60n }), RangeError);
  assert.equal(svc.now(), 0, 'nothing applied');
  assert.throws(() => rec.handle({ kind: 'keep_alive', now: 1, session: 9 }), { code: 'unknown_session' });
  assert.equal(rec.lines.length, 2);
  assert.throws(() => rec.handle({ kind: 'tick', now: -1 }), { code: 'out_of_range' });
  assert.equal(rec.lines.length, 2, 'a binding refusal applied nothing and is not recorded');
  verifyRecording(api, rec.text());
  // time_went_backwards changes nothing either, and its line would go back in time, which
  // the format refuses: it is not recorded, and the recording still replays.
  rec.handle({ kind: 'tick', now: 5 });
  assert.throws(() => rec.handle({ kind: 'tick', now: 3 }), { code: 'time_went_backwards' });
  assert.equal(rec.lines.length, 3);
  verifyRecording(api, rec.text());
});

test('the Recorder refuses a deadline past 2^53 - 1 before applying it, and an unrecordable token', () => {
  const svc = new api.LockService({ sessions: 2, locks: 1, claims: 2 });
  const gate = new api.FenceGate(2);
  const rec = new Recorder(svc);
  const max = Number.MAX_SAFE_INTEGER;
  assert.throws(() => rec.handle({ kind: 'open_session', now: 1, ttl: max }), RangeError);
  assert.equal(svc.now(), 0, 'nothing applied: not even time');
  assert.equal(svc.sessions().length, 0);
  const a = rec.handle({ kind: 'open_session', now: 1, ttl: max - 10 }).reply.session;
  assert.throws(() => rec.handle({ kind: 'keep_alive', now: 11, session: a }), RangeError);
  assert.equal(svc.now(), 1, 'the keep-alive was not applied');
  rec.handle({ kind: 'keep_alive', now: 10, session: a });
  for (const bad of [0, 2 ** 53, 1.5, '1', 1n]) assert.throws(() => rec.admit(gate, 10, 'r', bad), RangeError);
  assert.equal(gate.highest('r'), null, 'the gate saw none of them');
  assert.equal(rec.lines.length, 3);
  verifyRecording(api, rec.text());
});

test('the Recorder writes only what its reader reads: the header, each line and the file within the limits, times that never go back', () => {
  // A header over a line's limit: a long source, or a service of many sessions.
  const svc0 = new api.LockService({ sessions: 2, locks: 1, claims: 2 });
  assert.throws(() => new Recorder(svc0, { source: 'x'.repeat(LIMITS.lineBytes) }), RangeError);
  const many = new api.LockService({ sessions: 1000, locks: 1, claims: 2 });
  for (let i = 0; i < 1000; i++) many.openSession(0, 1000);
  assert.throws(() => new Recorder(many), /over the 16384 a line may be/);

  // A storage decision ahead of the service's time: a later input may not go back below it.
  const svc = new api.LockService({ sessions: 2, locks: 1, claims: 2 });
  const gate = new api.FenceGate(4);
  const rec = new Recorder(svc);
  rec.handle({ kind: 'tick', now: 5 });
  rec.admit(gate, 10, 'r', 1);
  assert.throws(() => rec.handle({ kind: 'tick', now: 7 }), /never go back/);
  assert.equal(svc.now(), 5, 'refused before it was applied');
  assert.throws(() => rec.handle({ kind: 'tick', now: 3 }), { code: 'time_went_backwards' }, 'below the service\'s own time: the core\'s refusal');
  for (const bad of [9, 1.5, -1, '11', 11n]) assert.throws(() => rec.admit(gate, bad, 'r', 2), RangeError, String(bad));
  assert.equal(gate.highest('r'), 1, 'the gate saw none of them');
  rec.handle({ kind: 'tick', now: 10 });
  rec.admit(gate, 10, 'r', 2);
  // A gate that held a token for a resource before the recording answers otherwise than
  // the replay's fresh fence: refused; a resource the recording admitted is fine.
  const old = new api.FenceGate(4);
  old.admit('s', 7);
  assert.throws(() => rec.admit(old, 10, 's', 3), /already holds a token/);
  assert.equal(old.highest('s'), 7);
  rec.admit(gate, 11, 's', 3);
  verifyRecording(api, rec.text());

  // An input whose line would be over the limit (an expiry releasing many holds) stands,
  // and the recorder stops there; what it wrote still replays.
  const big = new api.LockService({ sessions: 2, locks: 400, claims: 400 });
  const brec = new Recorder(big);
  const s = brec.handle({ kind: 'open_session', now: 0, ttl: 10 }).reply.session;
  for (let i = 0; i < 400; i++) brec.handle({ kind: 'acquire', now: 1, session: s, lock: `lock-${i}`, mode: 'exclusive', wait: 'none' });
  assert.throws(() => brec.handle({ kind: 'tick', now: 20 }), /cannot be recorded .*over the 16384 a line may be/);
  assert.equal(big.sessions().length, 0, 'the expiry stands');
  assert.throws(() => brec.handle({ kind: 'tick', now: 21 }), /stops here/);
  verifyRecording(api, brec.text());

  // The last line a recording may have before its end line, and no more: refused before
  // it is applied; the text, end line included, is the most lines a reader takes.
  const full = new api.LockService({ sessions: 1, locks: 1, claims: 1 });
  const frec = new Recorder(full);
  for (let t = 1; t < LIMITS.lines - 1; t++) frec.handle({ kind: 'tick', now: t });
  assert.equal(frec.lines.length, LIMITS.lines - 1);
  assert.throws(() => frec.handle({ kind: 'tick', now: LIMITS.lines }), /at most 20000 lines, its end line included/);
  assert.equal(full.now(), LIMITS.lines - 2);
  assert.equal(frec.text().split('\n').length - 1, LIMITS.lines);
  verifyRecording(api, frec.text());
});

test('a line whose refusal is the binding\'s (out_of_range, bad_argument), not the core\'s, is refused', () => {
  const text = small();
  // line 4 acquires; make its lock a number and claim the binding's refusal
  const bad = lie(text, 4, (body) => {
    const o = JSON.parse(body);
    o.input.lock = 5;
    delete o.reply;
    o.error = 'bad_argument';
    o.events = [];
    return JSON.stringify(o);
  });
  refuses(bad, 4, /not one the core can be given: bad_argument/);
});

test('a header asking for a core larger than a recording needs is refused before one is made', () => {
  const text = small();
  const big = lie(text, 1, (body) => {
    const o = JSON.parse(body);
    o.capacity.claims = LIMITS.rows + 1;
    return JSON.stringify(o);
  });
  refuses(big, 1, /asks for 65537 claims/);
  assert.throws(() => new Recorder(new api.LockService({ sessions: 2, locks: LIMITS.rows + 1, claims: 2 })), RangeError);
});

test('the header\'s tick_ms: written by the Recorder when asked, a second when absent, refused by line when malformed', () => {
  // an older recording (the committed sample) says nothing: a tick is a second, as before
  const old = parseRecording(readFileSync(SAMPLE, 'utf8'));
  assert.equal('tick_ms' in old.header, false);
  assert.equal(old.tickMs, DEFAULT_TICK_MS);
  assert.equal(old.tickSaid, false);
  assert.equal(DEFAULT_TICK_MS, 1000);
  // a recording in milliseconds (as a cluster's export writes it) says so and still replays
  const svc = new api.LockService({ sessions: 2, locks: 1, claims: 2 });
  const r = new Recorder(svc, { source: 'ms test', tickMs: 1 });
  r.handle({ kind: 'open_session', now: 0, ttl: 1500 });
  r.handle({ kind: 'tick', now: 1500 });
  const ms = verifyRecording(api, r.text());
  assert.equal(ms.header.tick_ms, 1);
  assert.equal(ms.tickMs, 1);
  assert.equal(ms.tickSaid, true);
  assert.match(r.lines[0], /^\{"format":"fencelock-recording","version":2,"source":"ms test","tick_ms":1,/);
  // malformed: refused on line 1, naming the field, before anything is applied
  for (const bad of ['0', '-1', '1.5', '"1"', 'null', '86400001', '{}']) {
    refuses(lie(r.text(), 1, (b) => b.replace('"tick_ms":1', `"tick_ms":${bad}`)), 1, /"tick_ms" is .*: it must be a whole number of milliseconds from 1 to 86400000/);
  }
  // the Recorder refuses a bad tick before it records anything
  for (const bad of [0, 1.5, '1', -3, 86400001]) assert.throws(() => new Recorder(svc, { tickMs: bad }), RangeError);
  svc.free?.();
});

test('the Recorder reads an input once: what it applies is what it records', () => {
  const svc = new api.LockService({ sessions: 2, locks: 4, claims: 4 });
  const rec = new Recorder(svc, { source: 'getters' });
  const s = rec.handle({ kind: 'open_session', now: 0, ttl: 5 }).reply.session;
  let reads = 0;
  const names = ['a', 'b', 'c', 'd'];
  const input = { kind: 'acquire', now: 1, session: s, get lock() { return names[reads++]; }, mode: 'exclusive', wait: 'none' };
  rec.handle(input);
  const recorded = JSON.parse(rec.lines.at(-1).split('\t')[0]).input.lock;
  assert.deepEqual(svc.locks(), [recorded], 'the lock applied is the one recorded');
  assert.equal(reads, 1);
  verifyRecording(api, rec.text());
  svc.free?.();
});

test('a time past 2^53 - 1 ms is refused by line, and an axis near it still ends', () => {
  // a day a tick: line 3's now is 2^53 - 1 ms and fits; a day later does not
  const svc = new api.LockService({ sessions: 2, locks: 1, claims: 2 });
  const r = new Recorder(svc, { source: 'day ticks', tickMs: 86400000 });
  r.handle({ kind: 'tick', now: 0 });
  r.handle({ kind: 'tick', now: 104249991 });
  assert.equal(verifyRecording(api, r.text()).tickMs, 86400000);
  const later = lie(r.text(), 3, (b) => b.replaceAll('104249991', '104249992'));
  refuses(later, 3, /"now" is 104249992 ticks of 86400000 ms, past 2\^53 - 1 ms/);
  // the recorder writes only what the reader reads: it refuses that tick before applying it
  const before = Number(svc.now());
  assert.throws(() => r.handle({ kind: 'tick', now: 104249992 }), RangeError);
  assert.equal(Number(svc.now()), before, 'nothing applied');
  // one tick of 1 ms near 2^53: the labels are bounded even where `n += 1` no longer moves
  // `n * step` (this ran for ever, filling memory)
  assert.ok(axisTicks(104249990, 104249991, 86400000).length <= 13);
  assert.ok(axisTicks(9e15, 9e15 + 1, 60000, 12).length <= 13);
  svc.free?.();
});

test('times are written in the recording\'s unit, exactly: seconds a tick by default, ms and s for a 1 ms tick', () => {
  // a second a tick: as the page always wrote it
  assert.equal(fmtTime(1500), '1500 s');
  assert.equal(fmtTime(0), '0 s');
  assert.equal(fmtTimeLong(45), '45 seconds');
  // a millisecond a tick (a cluster's export)
  assert.equal(fmtTime(250, 1), '250 ms');
  assert.equal(fmtTime(1500, 1), '1.5 s');
  assert.equal(fmtTime(123457, 1), '123.457 s');
  assert.equal(fmtTimeLong(999, 1), '999 milliseconds');
  assert.equal(fmtTime(3, 250), '750 ms');
  assert.equal(fmtTime(3, 2000), '6 s');
  // the timeline's window: 120 s of the recording's time
  assert.equal(ticksFor(120), 120);
  assert.equal(ticksFor(120, 1), 120000);
  // the axis: unchanged in seconds; in ms a 1-2-5 step with at most `most` labels, in the right unit
  assert.deepEqual(axisTicks(480, 600).map((x) => x.label), ['480s', '490s', '500s', '510s', '520s', '530s', '540s', '550s', '560s', '570s', '580s', '590s', '600s']);
  assert.deepEqual(axisTicks(0, 30).map((x) => x.t), [0, 5, 10, 15, 20, 25, 30]);
  const short = axisTicks(0, 1500, 1, 12);
  assert.deepEqual(short.map((x) => x.label), ['0', '200ms', '400ms', '600ms', '800ms', '1s', '1.2s', '1.4s']);
  assert.deepEqual(short.map((x) => x.t), [0, 200, 400, 600, 800, 1000, 1200, 1400]);
  const long = axisTicks(60000, 180000, 1, 12);
  assert.deepEqual(long.map((x) => x.label), ['60s', '70s', '80s', '90s', '100s', '110s', '120s', '130s', '140s', '150s', '160s', '170s', '180s']);
  assert.ok(axisTicks(0, 1234, 1, 6).length <= 7);
});

/** A semaphore's story in a recording: labelled sessions, permits, a watch, a holder's expiry. */
function semaphoreRecording() {
  const svc = new api.LockService({ sessions: 8, locks: 4, claims: 16 });
  const rec = new Recorder(svc, { source: 'a semaphore of 2' });
  const open = (label) => rec.handle({ kind: 'open_labeled', now: 0, ttl: 5, label }).reply.session;
  const [a, b, c, dash] = ['worker-a (pid 1)', 'worker-b (pid 2)', 'worker-c (pid 3)', 'dashboard'].map(open);
  const mode = { permits: 1, limit: 2 };
  rec.handle({ kind: 'watch', now: 1, session: dash, lock: 'db/pool' });
  for (const s of [a, b, c]) rec.handle({ kind: 'acquire', now: 1, session: s, lock: 'db/pool', mode, wait: 'forever' });
  for (const s of [b, c, dash]) rec.handle({ kind: 'keep_alive', now: 3, session: s });
  rec.handle({ kind: 'tick', now: 6 }); // a sent nothing since t=0: it expires; c is granted
  return { text: rec.text(), a, b, c, dash };
}

test('a recording with labelled sessions, permits and a watch replays, and a lie in a holder_changed event is refused', () => {
  const { text, a, c, dash } = semaphoreRecording();
  const rec = verifyRecording(api, text);
  const kinds = rec.entries.map((e) => e.input.kind);
  assert.deepEqual([...new Set(kinds)], ['open_labeled', 'watch', 'acquire', 'keep_alive', 'tick']);
  const tick = rec.entries.at(-1);
  const changed = tick.events.filter((e) => e.kind === 'holder_changed');
  assert.deepEqual(changed.map((e) => [e.session, e.change, e.holder, e.label]), [[dash, 'expired', a, 'worker-a (pid 1)'], [dash, 'granted', c, 'worker-c (pid 3)']]);
  assert.deepEqual(rec.entries.find((e) => e.input.session === c && e.input.kind === 'acquire').reply, { kind: 'queued', mode: { permits: 1, limit: 2 }, position: 1 });
  // the tick is the last line before the end line: say the dashboard was told of worker-b instead
  const n = text.trim().split('\n').length - 1;
  refuses(lie(text, n, (j) => j.replace('"label":"worker-c (pid 3)"', '"label":"worker-b (pid 2)"')), n, /the events differ/);
});

/**
 * A forced release of a named hold, as a cluster's export writes it (`release_hold`, its
 * fields in the export's order): session 1 held "jobs/x" with token 1, released it and took
 * it again (token 2, session 2 waiting); the forced release of token 1 is refused
 * not_holder and token 2 stays; the forced release of token 2 frees the lock for session 2.
 */
function forcedRelease() {
  const svc = new api.LockService({ sessions: 4, locks: 2, claims: 4 });
  const rec = new Recorder(svc, { source: 'a forced release', tickMs: 1 });
  const a = rec.handle({ kind: 'open_session', now: 0, ttl: 1000 }).reply.session;
  const b = rec.handle({ kind: 'open_session', now: 0, ttl: 1000 }).reply.session;
  rec.handle({ kind: 'acquire', now: 1, session: a, lock: 'jobs/x', mode: 'exclusive', wait: 'forever' });
  rec.handle({ kind: 'release', now: 2, session: a, lock: 'jobs/x' });
  rec.handle({ kind: 'acquire', now: 3, session: a, lock: 'jobs/x', mode: 'exclusive', wait: 'forever' });
  rec.handle({ kind: 'acquire', now: 3, session: b, lock: 'jobs/x', mode: 'exclusive', wait: 'forever' });
  assert.throws(() => rec.handle({ kind: 'release_hold', now: 4, session: a, lock: 'jobs/x', token: 1 }), { code: 'not_holder' });
  const freed = rec.handle({ kind: 'release_hold', now: 5, session: a, lock: 'jobs/x', token: 2, request: 1 });
  assert.deepEqual(freed, { reply: { kind: 'released', token: 2 }, events: [{ kind: 'granted', session: b, lock: 'jobs/x', mode: 'exclusive', token: 3 }] });
  svc.free?.();
  return { text: rec.text(), a, b };
}

test('release_hold lines (a forced release of a named hold) replay: the old token refused not_holder, its own released', () => {
  const { text, a, b } = forcedRelease();
  const rows = text.trim().split('\n');
  // the lines are the export's: kind, now, session, lock, token, request
  assert.equal(rows[7].split('\t')[0], `{"now":4,"input":{"kind":"release_hold","now":4,"session":${a},"lock":"jobs/x","token":1},"error":"not_holder","events":[]}`);
  assert.equal(rows[8].split('\t')[0], `{"now":5,"input":{"kind":"release_hold","now":5,"session":${a},"lock":"jobs/x","token":2,"request":1},"reply":{"kind":"released","token":2},"events":[{"kind":"granted","session":${b},"lock":"jobs/x","mode":"exclusive","token":3}]}`);
  const rec = verifyRecording(api, text);
  assert.deepEqual(rec.entries.filter((e) => e.input.kind === 'release_hold').map((e) => e.error ?? e.reply.kind), ['not_holder', 'released']);
  // lies about it are found: the old token claimed released, the new one claimed refused,
  // another token on the released line
  refuses(lie(text, 8, (j) => j.replace('"error":"not_holder"', '"reply":{"kind":"released","token":1}')), 8, /the core refuses release_hold: not_holder .*the recording says it answered \{"kind":"released","token":1\}/);
  refuses(lie(text, 9, (j) => j.replace(/"reply":\{[^}]*\}/, '"error":"not_holder"').replace(/"events":\[.*\]/, '"events":[]')), 9, /the core answers \{"kind":"released","token":2\}, the recording says it refused with not_holder/);
  refuses(lie(text, 9, (j) => j.replace('"token":2,"request":1', '"token":1,"request":1')), 9, /the core refuses release_hold: not_holder/);
});

test('a release_hold line\'s token is checked like the other numbers of a line, before anything is applied', () => {
  const { text } = forcedRelease();
  for (const bad of ['-1', '1.5', '"1"', 'null', '9007199254740992', '{}']) {
    refuses(lie(text, 8, (j) => j.replace('"token":1}', `"token":${bad}}`)), 8, /release_hold's "token" is .*: it must be a whole number from 0 to 2\^53 - 1/);
  }
  refuses(lie(text, 8, (j) => j.replace(',"token":1}', '}')), 8, /release_hold's "token" is nothing/);
  // a field the input does not have is the binding's refusal (bad_argument), not the core's
  refuses(lie(text, 8, (j) => j.replace('"token":1}', '"token":1,"holder":1}')), 8, /not one the core can be given: bad_argument/);
  // the shape is checked before the replay: a bad token on the last input line is found first
  const last = text.trim().split('\n').length - 1;
  const both = lie(lie(text, 2, (j) => j.replace('"ttl":1000', '"ttl":7')), last, (j) => j.replace('"token":2,', '"token":-2,'));
  refuses(both, last, /release_hold's "token" is -2/);
});

test('replayed, a wait that ends without a grant (cancelled, timed out, its session closed) leaves no client queued on the page', async () => {
  // the page's model (world.js through the recording scene), as render.js reads it
  const { replayScene } = await import('../src/scenes/replay.js');
  const { Timeline } = await import('../src/timeline.js');
  const svc = new api.LockService({ sessions: 4, locks: 2, claims: 8 });
  const rec = new Recorder(svc, { source: 'test' });
  const [a, b, c, d] = [0, 0, 0, 0].map(() => rec.handle({ kind: 'open_session', now: 0, ttl: 100 }).reply.session);
  rec.handle({ kind: 'acquire', now: 0, session: a, lock: 'l', mode: 'exclusive', wait: 'none' });
  rec.handle({ kind: 'acquire', now: 1, session: b, lock: 'l', mode: 'exclusive', wait: { until: 5 } });
  rec.handle({ kind: 'acquire', now: 1, session: c, lock: 'l', mode: 'exclusive', wait: 'forever' });
  rec.handle({ kind: 'acquire', now: 1, session: d, lock: 'l', mode: 'exclusive', wait: 'forever' });
  rec.handle({ kind: 'cancel', now: 2, session: c, lock: 'l' });
  rec.handle({ kind: 'close_session', now: 3, session: d });
  const tick = rec.handle({ kind: 'tick', now: 6 });
  assert.deepEqual(tick.events.map((e) => e.kind), ['wait_timed_out']);
  svc.free();
  const tl = new Timeline(api, replayScene(verifyRecording(api, rec.text()), 'waits.flrec'), {});
  const w = tl.seek(tl.length);
  assert.deepEqual(w.nodes.svc.core.waiters('l'), [], 'the core has no waiter');
  const queued = Object.values(w.clients).filter((cl) => cl.waiting != null).map((cl) => cl.name);
  assert.deepEqual(queued, [], 'no client still believes it is queued');
  const open = w.spans.filter((s) => s.kind === 'wait' && s.to === null).map((s) => `${s.lane}: ${s.label}`);
  assert.deepEqual(open, [], 'no wait bar runs on');
  // on the way, the three waiters were queued in order, then left one by one
  const seen = [];
  for (let step = 1; step <= tl.length; step += 1) {
    const places = Object.values(tl.seek(step).clients).filter((cl) => cl.waiting != null).map((cl) => cl.waiting);
    if (seen.at(-1) !== places.join()) seen.push(places.join());
  }
  assert.deepEqual(seen, ['', '1', '1,2', '1,2,3', '1,2', '1', '']);
  tl.free?.();
});

test('replayed, a write is captioned by its own resource\'s fence, and a token no recorded grant gave has its own writer', async () => {
  const { replayScene } = await import('../src/scenes/replay.js');
  const { Timeline } = await import('../src/timeline.js');
  const svc = new api.LockService({ sessions: 2, locks: 2, claims: 4 });
  const rec = new Recorder(svc, { source: 'test' });
  const a = rec.handle({ kind: 'open_session', now: 0, ttl: 100 }).reply.session;
  const t1 = rec.handle({ kind: 'acquire', now: 0, session: a, lock: 'l', mode: 'exclusive', wait: 'none' }).reply.token;
  rec.handle({ kind: 'release', now: 1, session: a, lock: 'l' });
  const t2 = rec.handle({ kind: 'acquire', now: 1, session: a, lock: 'l', mode: 'exclusive', wait: 'none' }).reply.token;
  const [gA, gB] = [new api.FenceGate(4), new api.FenceGate(4)];
  rec.admit(gA, 2, 'resA', t2);
  rec.admit(gB, 3, 'resB', t2 + 5); // a token from before the recording: no recorded grant
  rec.admit(gA, 4, 'resA', t1); // refused by resA's fence, after a write to resB
  for (const x of [svc, gA, gB]) x.free();
  const tl = new Timeline(api, replayScene(verifyRecording(api, rec.text()), 'two.flrec'), {});
  const captions = [];
  for (let step = 1; step <= tl.length; step += 1) captions.push(tl.seek(step).caption);
  // the writer is the session the core lists holding a lock with that token, else the one a
  // recorded grant named; a token neither places is the unknown writer's
  assert.ok(captions.includes(`t=2 (now 2, line 6): a write to "resA" with token ${t2} (session ${a}'s: the core lists it holding "l" with token ${t2}) is accepted; the fence's highest is ${t2}.`), captions.join('\n'));
  assert.ok(captions.some((c) => c.startsWith(`t=3 (now 3, line 7): a write to "resB" with token ${t2 + 5} is accepted; the fence's highest is ${t2 + 5}. Its writer is unknown: `) && c.includes('no recorded grant gave it')), captions.join('\n'));
  assert.ok(captions.includes(`t=4 (now 4, line 8): a write to "resA" with token ${t1} (session ${a}'s grant of "l", which the core no longer lists) is refused by the fence: ${t1} < ${t2}.`), captions.join('\n'));
  const w = tl.world;
  assert.deepEqual(w.stores.store.rows.map((x) => [x.token, x.accepted]), [[t2, true], [t1, false]]);
  assert.deepEqual(w.stores['store:resB'].rows.map((x) => [x.token, x.by, x.stale, x.unknown]), [[t2 + 5, 'unknown', false, true]]);
  assert.deepEqual(Object.values(w.clients).map((c) => c.name).sort(), [`S${a}`, 'unknown'], 'no client for a session that never was');
  // the refusal is a milestone of the story (as the page lists them: a 'milestone' record of a step)
  const milestones = tl.steps.flat().filter((r) => r.op === 'milestone').map((r) => r.label);
  assert.ok(milestones.includes(`${t1} refused`), milestones.join(', '));
});
