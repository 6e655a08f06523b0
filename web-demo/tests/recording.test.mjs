// The recording format without a browser: the Recorder over the node build of the wasm core
// (wasm/pkg/node) writes what verifyRecording replays, and every kind of damage or lie in a
// file is refused with the line it is on. Run by scripts/test-demo.sh.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Recorder, verifyRecording, parseRecording, RecordingError, crc32, LIMITS } from '../src/recording.js';

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
  execFileSync(process.execPath, [path.join(root, 'web-demo', 'recordings', 'make-sample.mjs')]);
  assert.equal(readFileSync(SAMPLE, 'utf8'), committed, 'regenerate the sample and commit it');
});

test('damage is found by the checksum of the line it is on', () => {
  const text = small();
  refuses(text.replace('"token":1', '"token":4'), 4, /checksum mismatch/);
  refuses(text.replace(/\t[0-9a-f]{8}\n/, '\n'), 1, /no checksum/);
  const rows = text.split('\n');
  rows[2] = rows[2].slice(0, 20);
  refuses(rows.join('\n'), 3, /no checksum/);
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
  refuses(lie(text, 1, (b) => b.replace('"version":1', '"version":2')), 1, /version 2 is not supported/);
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
});
