// Writes recordings/paused-holder.flrec with the Recorder over the node build of the wasm
// core (wasm/pkg/node, built by scripts/build-wasm.sh). The run: three workers on one lock
// service whose inputs are stamped with the service's (leader's) clock; worker-1 holds
// jobs/reindex, pauses, misses its keep-alives and is expired; worker-2, queued, is granted
// the next token; worker-1 wakes and its write with the old token is refused by the fence.
//   node web-demo/recordings/make-sample.mjs            (writes the sample)
//   node web-demo/recordings/make-sample.mjs --stdout   (prints it instead: the test compares)
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Recorder } from '../src/recording.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const api = require(path.join(here, '..', '..', 'wasm', 'pkg', 'node', 'fencelock_wasm.js'));

const svc = new api.LockService({ sessions: 16, locks: 8, claims: 32 });
const gate = new api.FenceGate(8);
const rec = new Recorder(svc, { source: 'web-demo/recordings/make-sample.mjs: three workers, worker-1 paused past its session timeout' });
const open = (now, ttl) => rec.handle({ kind: 'open_session', now, ttl }).reply.session;
const w1 = open(100, 10);
const w2 = open(100, 10);
const w3 = open(100, 10);
rec.handle({ kind: 'acquire', now: 101, session: w1, lock: 'jobs/reindex', mode: 'exclusive', wait: 'forever' });
rec.handle({ kind: 'acquire', now: 101, session: w2, lock: 'jobs/reindex', mode: 'exclusive', wait: 'forever' });
rec.handle({ kind: 'acquire', now: 101, session: w3, lock: 'cache/warm', mode: 'exclusive', wait: 'none' });
rec.admit(gate, 102, 'reindex-output', 1);
for (const s of [w1, w2, w3]) rec.handle({ kind: 'keep_alive', now: 103, session: s });
// worker-1 pauses here: no keep-alive from it after t=103
rec.handle({ kind: 'keep_alive', now: 106, session: w2 });
rec.handle({ kind: 'release', now: 107, session: w3, lock: 'cache/warm' });
rec.handle({ kind: 'close_session', now: 107, session: w3 });
rec.handle({ kind: 'keep_alive', now: 109, session: w2 });
rec.handle({ kind: 'keep_alive', now: 112, session: w2 });
rec.handle({ kind: 'tick', now: 113 }); // worker-1's session expires; worker-2 is granted
rec.admit(gate, 114, 'reindex-output', 3);
rec.handle({ kind: 'keep_alive', now: 115, session: w2 });
rec.admit(gate, 116, 'reindex-output', 1); // worker-1 wakes and writes with its old token
try {
  rec.handle({ kind: 'keep_alive', now: 117, session: w1 });
} catch (e) {
  if (e.code !== 'unknown_session') throw e;
}
rec.handle({ kind: 'release', now: 118, session: w2, lock: 'jobs/reindex' });
rec.handle({ kind: 'close_session', now: 118, session: w2 });
if (process.argv.includes('--stdout')) {
  process.stdout.write(rec.text());
} else {
  writeFileSync(path.join(here, 'paused-holder.flrec'), rec.text());
  console.log(`wrote ${rec.lines.length + 1} lines (the last, the end line)`);
}
