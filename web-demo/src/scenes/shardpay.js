// Scene 5: ShardPay's reconciliation walkthrough (seed "Distributed Locks and Fencing
// Tokens"): lease 30 s renewed every 10 s, a 45-second GC pause, fenceToken 42 vs 43, and
// the object store's 412 Precondition Failed.

import { pauseScene } from './pause.js';

const LOCK = '/locks/reconcile';

export const shardPay = pauseScene({
  meta: {
    key: 'shardpay',
    title: '5 · ShardPay reconciliation',
    short: 'ShardPay',
    lede: 'The end-of-day reconciliation job holds a 30-second lease renewed every 10 s. The object store checks a monotonic fencing token on every write.',
    fencingSwitch: true,
    tryThis: [
      'Switch the fence check off: W1\'s PUT with 42 lands over run 43.',
      'Make the lease 60 s: the 45 s pause now fits inside it.',
      'Kill W2 once it holds 43: the lease expires and nobody reruns.',
    ],
  },
  ids: ['W1', 'W2'],
  lock: LOCK,
  resource: 'report.xml',
  storeLabel: 'Object store',
  http: true,
  history: 41,
  hb: 10,
  margin: 5,
  checksLease: false, // ShardPay's worker relies on its renewal thread to report a lost lease
  pauseAt: 12,
  maxT: 150,
  params: {
    fencing: { label: 'object store checks fenceToken', type: 'switch', value: true },
    ttl: { label: 'lease', type: 'range', min: 20, max: 60, step: 5, value: 30, unit: 's' },
    pause: { label: 'GC pause length', type: 'range', min: 5, max: 90, step: 5, value: 45, unit: 's' },
  },
  jobsA: [
    { rel: 14, do: 'write', data: 'report.xml — W1 totals', part: 'report.xml' },
    { rel: 16, do: 'release' },
  ],
  jobsB: [
    { rel: 1, do: 'write', data: 'report.xml — run 43 in progress', part: 'report.xml' },
    { rel: 20, do: 'write', data: 'report.xml — run 43 final totals', part: 'report.xml' },
    { rel: 21, do: 'release' },
  ],
  text: {
    start: (tok, pos, P) =>
      `Worker W1 acquires etcd lock ${LOCK}; receives fenceToken=${tok}, lease ${P.ttl}s. Standby W2 asks for the same lock and waits (queue position ${pos}).`,
    step(w, ev, P, h) {
      const a = w.clients.W1;
      const wa = ev.writes.find((x) => x.id === 'W1');
      const wb = ev.writes.find((x) => x.id === 'W2');
      if (wa) {
        const r = wa.row;
        if (!r.accepted)
          return `W1 resumes, completes scan, attempts PUT report.xml with token ${r.token}. Object store rejects: maxFenceSeen=${r.highest} — W1's write discarded (412 Precondition Failed). ` +
            `Its renewal thread would have reported the lost lease, but the PUT went first.`;
        if (r.stale)
          return `W1 resumes, completes scan, PUTs report.xml with token ${r.token} — and with no fence check the store takes it over W2's run. ` +
            `This is ShardPay's early incident: two nodes both uploaded, duplicate settlement totals; finance caught a $2M double-count before wire.`;
        return `W1's pause ended while its lease was still valid: its PUT with token ${r.token} is legitimate.`;
      }
      if (ev.pausedNow)
        return `W1 scans the ledger for unsettled transfers; a GC pause stops the worker for ${P.pause} seconds. Its heartbeat thread (renewLease() every 10 s) is frozen too.`;
      if (ev.expired.some((o) => o.session === a.session)) {
        const g = ev.granted[0];
        return `W1 misses its renewals — its ${P.ttl}-second lease expires and the lock is released for the standby.` +
          (g ? ` Standby W2 acquires the lock; receives fenceToken=${g.token}.` : '');
      }
      if (ev.granted.length) return `W1 releases the lock; standby W2 acquires it and receives fenceToken=${ev.granted[0].token}.`;
      if (wb && wb.row.accepted) {
        const s = w.stores.store;
        if (s.rows.some((r) => r.byId === 'W1' && r.t > (w.clients.W2.grantedAt ?? 0)))
          return s.corrupted
            ? `W2 writes its report with token ${wb.row.token}, but W1's stale PUT already landed in between: two runs' output in one reconciliation.`
            : `W2 writes report with token ${wb.row.token} — correct single reconciliation output.`;
        return P.fencing
          ? `W2 starts its run: its PUT of report.xml carries fenceToken=${wb.row.token} in the object metadata. The store's maxFenceSeen is now ${wb.row.token}.`
          : `W2 starts its run and PUTs report.xml. The store keeps no maxFenceSeen: it just takes the object.`;
      }
      if (w.t === 10 && a.status === 'running')
        return `W1's heartbeat thread calls renewLease(): the lock service moves the lease deadline to t=${h.deadline('W1')}.`;
      if (a.status === 'paused' && a.pausedBy === 'gc') {
        const d = h.deadline('W1');
        return d != null
          ? `W1 is paused. Missed renewal releases the lock for the standby: the lock service will expire W1's lease at t=${d}.`
          : `W2 holds the lock and runs the reconciliation. W1 is still paused and still believes it holds fenceToken=${a.token}.`;
      }
      if (w.t < 10 && a.holding) return `W1 scans the ledger for unsettled transfers, holding fenceToken=${a.token}.`;
      return null;
    },
    end(w) {
      const s = w.stores.store;
      const refused = s.rows.find((r) => !r.accepted);
      const last = s.rows.filter((r) => r.accepted).at(-1);
      if (refused)
        return `Outcome: token ${refused.token} got 412 Precondition Failed; report.xml is W2's run (token ${last?.token}) — one reconciliation output. ` +
          `Lock renewal failure should be treated as fatal: stop work, do not assume the lock is held.`;
      if (s.corrupted)
        return `Outcome: report.xml mixes two runs. TTL locks alone are unsafe — storage must reject stale fencing tokens. Turn the fence check back on and replay.`;
      if (w.log.some((l) => l.text.startsWith('sessionExpired')) || Object.values(w.clients).some((c) => c.status !== 'running'))
        return `Outcome: no stale PUT reached the object store this time (${s.rows.filter((r) => r.accepted).length} accepted). ${s.fencing ? 'The fence checked every token anyway.' : 'Nothing checked: luck, not design.'}`;
      return `Outcome: the pause fit inside the lease, so W1 kept the lock and there was a single run. Make the pause longer than the lease to see why the fence is needed.`;
    },
  },
});
