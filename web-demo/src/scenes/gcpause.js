// Scene 1: the GC-pause timeline (after the fencing diagram in Martin Kleppmann's "How to do
// distributed locking"): A acquires 34, A pauses, its session expires, B acquires 35 and
// writes, A resumes and writes with 34.

import { pauseScene } from './pause.js';

const LOCK = 'jobs/reindex';

export const gcPause = pauseScene({
  meta: {
    key: 'gc',
    title: '1 · The GC pause',
    short: 'GC pause',
    lede: 'A holds the lock and pauses. The service, seeing only silence, expires A and grants B. Then A wakes up.',
    fencingSwitch: true,
    tryThis: [
      'Turn the fencing switch off and jump to the end: the stale write lands.',
      'Set the pause to 5 s: shorter than the timeout, A keeps its session.',
      'Timeout 30 s, pause 45 s: the expiry only moves — the window stays.',
      'Kill B after its first write (t ≥ 11): A\'s late 34 is refused all the same — the storage has seen 35.',
      'Kill B at t=10, the moment it gets 35: the storage never sees 35, and A\'s 34 gets through.',
    ],
  },
  ids: ['A', 'B'],
  lock: LOCK,
  resource: 'reindex-output',
  storeLabel: 'Storage',
  http: false,
  history: 33,
  hb: 3,
  margin: 2,
  checksLease: true,
  pauseAt: 2,
  maxT: 120,
  params: {
    fencing: { label: 'storage checks fencing tokens', type: 'switch', value: true },
    ttl: { label: 'session timeout', type: 'range', min: 6, max: 40, step: 1, value: 10, unit: 's' },
    pause: { label: 'GC pause length', type: 'range', min: 1, max: 60, step: 1, value: 25, unit: 's' },
  },
  jobsA: [
    { rel: 1, do: 'write', data: 'index part 1 (rows 1–500)', part: 'rows 1–500' },
    { rel: 2, do: 'write', data: 'index part 2 (rows 501–1000)', part: 'rows 501–1000' },
    { rel: 4, do: 'release' },
  ],
  jobsB: [
    { rel: 1, do: 'write', data: 'reindex part 1 (rows 1–500)', part: 'rows 1–500' },
    { rel: 8, do: 'write', data: 'reindex part 2 (rows 501–1000)', part: 'rows 501–1000' },
    { rel: 20, do: 'release' },
  ],
  words: { refusedVerb: 'was refused', store: 'storage', token: 'token', refused: 'refused' },
  text: {
    start: (tok, pos) =>
      `A acquires ${JSON.stringify(LOCK)}: the grant returns fencing token ${tok} — the lock service's revision after ${tok - 1} earlier grants, plus one — and A starts work. ` +
      `B asks too; the lock is held, so B joins the wait queue (position ${pos}) and is told when it is its turn — no polling.`,
    lesson:
      'The resource, not the lock service, enforced exclusion by rejecting a lower token. The mechanism is one integer comparison, but it relocates the guarantee: ' +
      'from a promise about the future ("nobody else holds this") to a check in the present ("this token is stale", a fact).',
    unfencedLesson:
      'No timeout tuning fixes this: a longer timeout only moves the expiry and the window after it. A session timeout is a clock opinion; the resource\'s token check is a fact.',
    staleExtra: () => 'Every component behaved correctly: the service expired a silent session, and A was merely slow.',
    quiet(w) {
      const a = w.clients.A;
      const b = w.clients.B;
      if (!b.holding || a.status !== 'paused') return null;
      const still = `A, frozen, still believes it holds ${a.token}.`;
      // B works only while it runs, and holds the lock only while the core lists its grant
      const listed = w.nodes.svc.core.holders(LOCK).some((h) => w.sessions[`svc:${h.session}`] === 'B');
      if (b.status === 'running') return listed ? { text: `B holds the lock and works. ${still}` } : null;
      if (b.status === 'paused') return { text: `${listed ? 'B holds the lock but is paused too: it does no work.' : 'B is paused too, and the service no longer lists its grant.'} ${still}` };
      return { text: `B is dead${listed ? `; the service still lists its grant (token ${b.token}): its session has not expired yet` : ''}. ${still}` };
    },
  },
});
