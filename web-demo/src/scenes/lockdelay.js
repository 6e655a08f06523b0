// Scene 7: lock-delay, as Chubby describes it ("The Chubby lock service for loosely-coupled
// distributed systems", Burrows): for a resource that cannot check tokens, the lock service
// holds a lock free for a while after its holder's session expires, so a request the old
// holder already sent can drain before the next holder starts. The delay is the core's own
// `lock_delay` (its config); the storage here checks nothing. A pause longer than the delay
// still breaks it: a delay bounds the network's lateness, not a process's.

import { pauseScene } from './pause.js';
import { facts as factsOf } from './facts.js';

const LOCK = 'jobs/compact';

/** When each client's first write landed, and when the lock-delay scene's late write did. */
export function drainVerdict(w) {
  const s = w.stores.store;
  const stale = s.rows.filter((r) => r.accepted && r.stale);
  const grants = factsOf(w).grants.filter((g) => g.id === 'B');
  const bFirst = s.rows.find((r) => r.byId === 'B');
  const broken = stale.filter((r) => bFirst && r.t >= bFirst.t);
  const drained = stale.filter((r) => !bFirst || r.t < bFirst.t);
  return { stale, drained, broken, grantB: grants[0] ?? null, bFirst: bFirst ?? null, kind: broken.length ? 'broken' : drained.length ? 'drained' : 'ok' };
}

const base = pauseScene({
  meta: {
    key: 'lockdelay',
    title: '7 · Lock-delay',
    short: 'Lock-delay',
    lede: 'A resource that cannot check tokens. After an expiry the service keeps the lock free for a while, so a write already on its way lands before the next holder starts.',
    fencingSwitch: false,
    tryThis: [
      'Set the lock-delay to 0: B is granted the moment A expires, and A\'s late write lands in the middle of B\'s run.',
      'Keep the delay, make A\'s pause 16 s: the late write arrives after the delay ended — a delay bounds network lateness, not a pause.',
      'Make the pause 2 s: A\'s session never expires and its write is legitimate.',
    ],
  },
  ids: ['A', 'B'],
  lock: LOCK,
  resource: 'segments',
  storeLabel: 'Storage (no tokens)',
  storeLane: 'Storage',
  http: false,
  history: 0,
  hb: 2,
  margin: 1,
  checksLease: true,
  pauseAt: 3,
  maxT: 60,
  params: {
    ttl: { label: 'session timeout', type: 'range', min: 4, max: 12, step: 1, value: 6, unit: 's' },
    delay: { label: 'lock-delay', type: 'range', min: 0, max: 12, step: 1, value: 6, unit: 's' },
    pause: { label: 'A\'s pause before its write', type: 'range', min: 1, max: 30, step: 1, value: 8, unit: 's' },
  },
  jobsA: [
    { rel: 1, do: 'write', data: 'segment 1 by A', part: 'segment 1' },
    { rel: 3, do: 'write', data: 'segment 2 by A', part: 'segment 2' },
    { rel: 5, do: 'release' },
  ],
  jobsB: [
    { rel: 1, do: 'write', data: 'segment 1 by B', part: 'segment 1' },
    { rel: 2, do: 'write', data: 'segment 2 by B', part: 'segment 2' },
    { rel: 4, do: 'release' },
  ],
  words: { refusedVerb: 'was refused', store: 'storage', token: 'token', refused: 'refused' },
  text: {
    start: (tok, pos, P) =>
      `A acquires ${JSON.stringify(LOCK)} (token ${tok}); B waits in the queue (position ${pos}). The storage cannot check tokens — think of a file system or a legacy API. ` +
      `The lock service is configured with a lock-delay of ${P.delay} s: after a session expires, its locks stay free but ungranted that long.`,
    noGrant: (w, P) => {
      const until = w.nodes.svc.core.lockDelayUntil(LOCK);
      return until != null
        ? ` B is waiting, but the service holds the lock free until t=${until} (lock-delay ${P.delay} s), so a late write from A — one held up in the network, or one a paused A sends when it wakes — lands before B starts if it arrives by then.`
        : ' Nobody is waiting for it.';
    },
    grantAfterDelay: (w, g) => `The lock-delay is over: the service grants the lock to the head of the queue, ${g.id}, with token ${g.token}. Anything from A that arrived by now landed before B's run; anything later lands after B has begun writing.`,
    lesson: '',
    frozen(w) {
      const until = w.nodes.svc.core.lockDelayUntil(LOCK);
      const holders = w.nodes.svc.core.holders(LOCK);
      if (until != null) return `A is still frozen. Its session is gone; the lock is free but held back until t=${until} (lock-delay), so nobody else writes yet. A will wake at t=${w.clients.A.mem.resumeAt}.`;
      if (holders.length) return `A is still frozen and unaware. The lock-delay is over and B holds the lock now; A will wake at t=${w.clients.A.mem.resumeAt} believing it holds ${w.clients.A.token}.`;
      return null;
    },
    ending(w, P) {
      const v = drainVerdict(w);
      const out = [];
      const exp = factsOf(w).expiries.find((e) => e.id === 'A');
      // the pauses A really had (the scripted one, or yours), not the slider's
      const pauses = w.spans.filter((sp) => sp.lane === 'A' && sp.kind === 'pause');
      const paused = (sps) => sps.map((sp) => `${(sp.to ?? w.t) - sp.from} s (t=${sp.from}–${sp.to ?? w.t})`).join(' and ');
      if (!v.stale.length) {
        out.push(exp
          ? 'No late write from A reached the storage after its session expired.'
          : `A's session never expired: ${pauses.length ? `A was paused ${paused(pauses)}, and its keep-alive reached the service before the session's deadline` : 'A was never paused'}. Every write it made was its own.`);
      }
      for (const r of v.drained) {
        out.push(`A's late write landed at t=${r.t}, after its session expired${exp ? ` at t=${exp.t}` : ''} but before B started${v.grantB ? ` (B was granted at t=${v.grantB.t}, when the ${P.delay} s lock-delay ended)` : ''}: it drained, and B's run then wrote over it. Lock-delay helped — because the write arrived within the delay.`);
      }
      for (const r of v.broken) {
        out.push(`A's late write landed at t=${r.t}, after B had started writing at t=${v.bFirst.t}: the storage holds B's run with A's stale segment in it.${P.delay ? ` The ${P.delay} s lock-delay covers a write that arrives within ${P.delay} s of the expiry; A was paused ${paused(pauses.filter((sp) => sp.from <= r.t)) || 'for longer'}, and a pause has no bound.` : ' With no lock-delay, B started the moment A expired.'} Only a resource that checks a fencing token refuses a write however late it is.`);
      }
      return out.join(' ');
    },
  },
});

export const lockDelay = {
  ...base,
  /** The base outcome plus whether the late write drained before B started (`drain`). */
  outcome: (w) => ({ ...base.outcome(w), drain: drainVerdict(w).kind }),
};
