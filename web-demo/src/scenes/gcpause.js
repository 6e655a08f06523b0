// Scene 1: the GC-pause timeline of the seed ("Reference: Distributed Locks and Fencing
// Tokens"): t0 A acquires 34, t1 A pauses, t2 its session expires, t3 B acquires 35, t4 A
// resumes and writes with 34.

import { pauseScene } from './pause.js';

const LOCK = 'jobs/reindex';

function lastWrite(ev, id) {
  return ev.writes.find((x) => x.id === id);
}

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
      'Kill B while it holds 35 (click it): A\'s late 34 is refused all the same.',
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
  text: {
    start: (tok, pos) =>
      `t0 — A acquires ${JSON.stringify(LOCK)}: the grant returns {token: ${tok}} and A starts work. ` +
      `B asks too; the lock is held, so its request joins the ordered wait queue (position ${pos}) — there is no polling.`,
    step(w, ev, P, h) {
      const a = w.clients.A;
      const fencing = P.fencing;
      const wa = lastWrite(ev, 'A');
      const wb = lastWrite(ev, 'B');
      if (wa && (ev.resumedNow || wa.late)) {
        const r = wa.row;
        if (!r.accepted)
          return `t4 — A's pause ends. A believes it still holds the lock and writes with token ${r.token}. ` +
            `Its lease check passed before the pause, so it does not check again. The storage remembers the highest token it has seen (${r.highest}) and rejects anything lower: ${r.token} < ${r.highest}, refused as stale. ` +
            `A learns it lost the lock the only way a paused process can, by being told after the fact.`;
        if (r.stale)
          return `t4 — A's pause ends. A believes it still holds the lock and writes with token ${r.token}. The storage checks nothing, so the write lands on top of B's: the data is corrupted. ` +
            `Every component behaved correctly: the service expired a dead-looking session and A was merely slow.`;
        return `A's ${P.pause}-second pause ended before its session timed out, so A is still the holder: its write with token ${r.token} is legitimate and its heartbeat renews the session. ` +
          `Nothing goes wrong — this time. Pauses have no upper bound; a longer one would not be this lucky.`;
      }
      if (ev.pausedNow) {
        const d = h.deadline('A');
        const l = ev.prepared?.lease;
        return `t1 — ${l ? `A checks its lease by its own clock (safe until t=${l.until}) and is about to write — then ` : ''}A hits a ${P.pause}-second stop-the-world garbage-collection pause. ` +
          `Nothing in A runs: no work, no heartbeats. The service has A's session deadline at t=${d} (last heartbeat + the ${P.ttl}-second timeout).`;
      }
      if (ev.steppedDown)
        return `${ev.steppedDown.id} checks its lease by its own clock before writing: ${ev.steppedDown.lease.state}. It stops acting — erring toward unavailability rather than unsafety.`;
      if (ev.expired.length && ev.expired.some((o) => o.session === a.session)) {
        const g = ev.granted[0];
        return `t2 — A misses heartbeats; the service expires its session and releases the lock.` +
          (g ? ` t3 — the head of the wait queue is notified in the same tick: B acquires the lock, token ${g.token}, and starts work.` : '') +
          ` A is still frozen and still believes it holds ${a.token ?? 'the lock'}.`;
      }
      if (ev.granted.length) {
        const g = ev.granted[0];
        const who = w.sessions[`svc:${g.session}`];
        return `The lock is released: exactly one waiter is notified. ${who} is granted token ${g.token}.`;
      }
      if (wb && wb.row.accepted && w.stores.store.rows.filter((r) => r.byId === 'B').length > 1)
        return `B writes its next batch with token ${wb.row.token}. B holds the lock and does its work; A, frozen, still believes it holds ${a.token ?? 'it'}.`;
      if (wb && wb.row.accepted) {
        return fencing
          ? `B writes to the resource with token ${wb.row.token} and it is accepted. The storage records ${wb.row.token} as the highest token it has seen.`
          : `B writes with token ${wb.row.token}. The storage accepts it — it checks nothing; it is just a store.`;
      }
      if (wa && wa.row.accepted) {
        return fencing
          ? `A writes its first batch with token ${wa.row.token}; every write to the protected resource carries the grant's token. The storage records ${wa.row.token} as the highest seen.`
          : `A writes its first batch. The storage keeps whatever arrives last; it never looks at a token.`;
      }
      if (a.status === 'paused' && a.pausedBy === 'gc') {
        const d = h.deadline('A');
        if (d != null)
          return `A is frozen (${w.t - 2} of ${P.pause} seconds). B keeps heartbeating every 3 s; A sends nothing. ` +
            `The service only sees silence; A's session deadline is t=${d}.`;
        return `A is still frozen and unaware. The lock belongs to B now; A will wake at t=${a.mem.resumeAt} believing it holds ${a.token}. ` +
          `This gap is the danger window: a longer timeout only moves it.`;
      }
      return null;
    },
    end(w, P) {
      const s = w.stores.store;
      const refused = s.rows.find((r) => !r.accepted);
      const accepted = s.rows.filter((r) => r.accepted).map((r) => r.token);
      if (refused)
        return `Outcome: ${refused.token} refused, ${accepted.at(-1)} accepted. The resource, not the lock service, enforces exclusion by rejecting a lower token. ` +
          `The mechanism is one integer comparison, but it relocates the guarantee: from a promise about the future ("nobody else holds this") to a check in the present ("this token is stale", a fact).`;
      if (s.corrupted)
        return `Outcome: corrupted — A's stale write sits on top of B's. No timeout tuning fixes this; a longer timeout trades t2's promptness for a wider t4 window` +
          (P.ttl !== 10 ? ` (at ${P.ttl} s the expiry simply moved)` : '') +
          `. Turn on "storage checks fencing tokens": a TTL is a clock opinion; the resource's token check is a fact.`;
      if (w.log.some((l) => l.text.startsWith('sessionExpired')) || Object.values(w.clients).some((c) => c.status !== 'running'))
        return `Outcome: no stale write reached the storage this time (accepted: ${accepted.join(', ') || 'nothing'}). The storage ${s.fencing ? 'checked every token anyway' : 'checked nothing: it was luck, not design'}.`;
      return `Outcome: nothing went wrong, because the pause (${P.pause} s) was shorter than the session timeout (${P.ttl} s). ` +
        `But a stop-the-world pause has no upper bound: make it longer than the timeout and the same story ends in corruption — or, with fencing, in a refused write.`;
    },
  },
});
