// Scene 5: the same failure in an HTTP setting. ShardPay is a made-up payments service whose
// end-of-day reconciliation job writes one report to an object store: lease 30 s renewed
// every 10 s, a 45-second GC pause, fenceToken 42 vs 43, and the object store's conditional
// write answering 412 Precondition Failed to the lower token.

import { pauseScene } from './pause.js';

const LOCK = '/locks/reconcile';

export const shardPay = pauseScene({
  meta: {
    key: 'shardpay',
    title: '5 · ShardPay reconciliation',
    short: 'ShardPay',
    lede: 'ShardPay (a made-up payments service) runs an end-of-day reconciliation job that writes the day\'s settlement totals to report.xml. The job holds a 30-second lease renewed every 10 s. The object store checks a monotonic fencing token on every write.',
    fencingSwitch: true,
    tryThis: [
      'Switch the fence check off: W1\'s PUT with 42 lands over run 43.',
      'Make the lease 60 s: the 45 s pause now fits inside it.',
      'Kill W2 at t=40, the moment it gets 43: the store never sees 43, so W1\'s 42 is accepted — a fence only knows the tokens written to it.',
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
  checksLease: false, // the worker relies on its renewal thread to report a lost lease
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
  words: { refusedVerb: 'got 412 Precondition Failed', store: 'object store', token: 'fenceToken', refused: '412 Precondition Failed' },
  text: {
    start: (tok, pos, P) =>
      `Worker W1 acquires the lock ${LOCK} and receives fencing token (fenceToken) ${tok}, with a ${P.ttl} s lease that its heartbeat thread renews every 10 s. ` +
      `Standby W2 asks for the same lock and waits (queue position ${pos}).`,
    lesson: 'Lock renewal failure should be treated as fatal: stop work, do not assume the lock is held — and let the store check the token, because the worker cannot always know.',
    unfencedLesson: 'TTL locks alone are unsafe — storage must reject stale fencing tokens.',
    refusedExtra: (wr) => (wr.knew ? 'Its renewal thread reported the lost lease as W1 woke, but the PUT went first.' : 'Its renewal thread would have reported the lost lease, but the PUT went first.'),
    // only when the late upload replaced another writer's report (a killed W2 may have written none)
    staleExtra: (wr) =>
      wr.before && wr.before.by !== wr.id
        ? `${wr.id}'s late upload replaced the report ${wr.before.by}, the lock's holder, had begun: report.xml now holds settlement totals from a worker that no longer held the lock, and whatever reads it before ${wr.before.by} uploads again takes them as the day's. With the check on, the store would compare fenceToken ${wr.row.token} with the ${wr.before.token} it has seen and turn the late upload away.`
        : '',
    quiet(w, P, h) {
      const a = w.clients.W1;
      if (w.t === 10 && a.status === 'running' && h.deadline('W1') != null)
        return { text: `W1's heartbeat thread calls renewLease(): the lock service moves the lease deadline to t=${h.deadline('W1')}.` };
      if (w.t < 10 && a.holding && a.status === 'running') return { text: `W1 scans the ledger for unsettled transfers, holding fenceToken=${a.token}.` };
      return null;
    },
  },
});
