// Scene 7: lock-delay, as Chubby describes it ("The Chubby lock service for loosely-coupled
// distributed systems", Burrows): for a resource that cannot check tokens, the lock service
// holds a lock free for a while after its holder's session expires, so a request the old
// holder already sent can drain before the next holder starts. The delay is the core's own
// `lock_delay` (its config); the storage here checks nothing. A pause longer than the delay
// still breaks it: a delay bounds the network's lateness, not a process's.

import { pauseScene } from './pause.js';
import { facts as factsOf, storeVerdict } from './facts.js';
import { whoseSession } from './common.js';

const LOCK = 'jobs/compact';

/**
 * What A's late writes did, from the storage's rows in the order it took them (several can
 * land in one tick), the core's grant to B as recorded, and what the storage holds at the end:
 * for each stale write that landed, whether B had been granted the lock by then (`drained`:
 * not yet), B's write before it if any (`bBefore`), the later write over the same part if any
 * (`over`: else the storage still holds it). `kind`: 'ok' (no late write), 'drained' (every
 * one landed before B was granted), 'broken' (one landed after).
 */
export function drainVerdict(w) {
  const s = w.stores.store;
  const rows = s.rows;
  const grantB = factsOf(w).grants.find((g) => g.id === 'B') ?? null;
  const bFirst = rows.find((r) => r.byId === 'B' && r.accepted) ?? null;
  const late = [];
  rows.forEach((r, i) => {
    if (!(r.accepted && r.stale)) return;
    // the core's grant is fed before any write of its tick: a grant at r.t came first
    const drained = !grantB || grantB.t > r.t;
    const bBefore = rows.slice(0, i).find((x) => x.byId === 'B' && x.accepted) ?? null;
    const over = rows.slice(i + 1).find((x) => x.accepted && x.part === r.part) ?? null;
    late.push({ row: r, index: i, drained, bBefore, over });
  });
  const kind = !late.length ? 'ok' : late.every((x) => x.drained) ? 'drained' : 'broken';
  return { late, stale: late.map((x) => x.row), grantB, bFirst, kind };
}

/** Why B wrote nothing, from its state now and the run's facts. */
function whyBNeverWrote(w, grantB) {
  const b = w.clients.B;
  const exp = factsOf(w).expiries.find((e) => e.id === 'B');
  const notes = [];
  let why;
  if (b.status === 'dead') {
    why = 'B was killed';
    const killed = w.marks.find((m) => m.lane === 'B' && m.kind === 'crash')?.t;
    if (killed != null) why += ` at t=${killed}`;
  } else if (b.status === 'paused') {
    why = 'B is paused';
    const since = w.spans.filter((sp) => sp.lane === 'B' && sp.kind === 'pause').at(-1)?.from;
    if (since != null) notes.push(`since t=${since}`);
  } else why = grantB ? 'B stopped before its first write' : 'B was never granted the lock';
  if (exp) notes.push(`its session expired at t=${exp.t}`);
  return `${why}${notes.length ? ` (${notes.join('; ')})` : ''}`;
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
      // who waits is the core's queue now (a dead or paused client's session can still be in it)
      const core = w.nodes.svc.core;
      const until = core.lockDelayUntil(LOCK);
      const queue = core.waiters(LOCK).map((q) => whoseSession(w, 'svc', q.session) ?? `session ${q.session}`);
      const head = queue[0];
      const st = head && w.clients[head]?.status;
      const waits = head ? `${head} is waiting${st === 'dead' ? ` (its session is still queued, though ${head} is dead)` : st === 'paused' ? ` (its session is queued; ${head} is paused)` : ''}` : null;
      if (until != null) {
        return waits
          ? ` ${waits}, but the service holds the lock free until t=${until} (lock-delay ${P.delay} s), so a late write from A — one held up in the network, or one a paused A sends when it wakes — lands before ${head} starts if it arrives by then.`
          : ` Nobody is waiting for it now, and the service holds the lock free until t=${until} all the same (lock-delay ${P.delay} s).`;
      }
      return waits ? ` ${waits}.` : ' Nobody is waiting for it.';
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
      const g = v.grantB;
      const corrupted = storeVerdict(w).corrupted;
      // the pauses A really had (the scripted one, or yours), not the slider's
      const pauses = w.spans.filter((sp) => sp.lane === 'A' && sp.kind === 'pause');
      const paused = (sps) => sps.map((sp) => `${(sp.to ?? w.t) - sp.from} s (t=${sp.from}–${sp.to ?? w.t})`).join(' and ');
      if (!v.late.length) {
        out.push(exp
          ? 'No late write from A reached the storage after its session expired.'
          : `A's session never expired: ${pauses.length ? `A was paused ${paused(pauses)}, and its keep-alive reached the service before the session's deadline` : 'A was never paused'}. Every write it made was its own.`);
      }
      // when B was granted, and why then (the core's lock-delay as A expired, or none)
      const grantAt = g
        ? `at t=${g.t}${exp?.delayUntil != null && g.t === exp.delayUntil ? `, when the ${P.delay} s lock-delay ended` : ''}`
        : null;
      const cap = (x) => `${x[0].toUpperCase()}${x.slice(1)}`;
      for (const x of v.late) {
        const r = x.row;
        const landed = `A's late write landed at t=${r.t}${exp ? ` (its session had expired at t=${exp.t})` : ''}`;
        const noB = !v.bFirst ? ` B never wrote: ${whyBNeverWrote(w, g)}.` : '';
        const still = `nothing wrote over it: the storage still holds A's stale ${r.part}${corrupted ? ' beside B\'s data — the data is corrupted' : ''}`;
        if (x.drained) {
          const held = r.delayUntil != null ? `, while the service held the lock back (lock-delay until t=${r.delayUntil})` : ', while nobody held the lock';
          const helped = x.over?.byId === 'B' && r.delayUntil != null;
          out.push(`${landed}${held}, before B was granted it${g ? ` (${grantAt})` : ''}: it drained.${noB} ` +
            (x.over ? `${x.over.by} then wrote ${r.part} over it at t=${x.over.t}.` : `${cap(still)}.`) +
            (helped ? ' Lock-delay helped — because the write arrived within the delay.' : ''));
        } else {
          const order = x.bBefore
            ? `, and had started writing at t=${x.bBefore.t}`
            : v.bFirst
              ? `, but had not written yet${v.bFirst.t === r.t ? ': its first write came after A\'s, in the same tick' : ''}`
              : '';
          out.push(`${landed}. By then B had been granted the lock (${grantAt})${order}.${noB} ` +
            (x.over
              ? `${x.over.by} then wrote ${r.part} over it at t=${x.over.t}: the storage ends with ${x.over.by}'s data there, but from t=${r.t} to t=${x.over.t} it held A's stale ${r.part}.`
              : `${cap(still)}.`) +
            (P.delay
              ? ` The ${P.delay} s lock-delay covers a write that arrives within ${P.delay} s of the expiry; A was paused ${paused(pauses.filter((sp) => sp.from <= r.t)) || 'for longer'}, and a pause has no bound.`
              : exp && g.t === exp.t ? ' With no lock-delay, B was granted the moment A expired.' : '') +
            ' Only a resource that checks a fencing token refuses a write however late it is.');
        }
      }
      return out.join(' ');
    },
  },
});

export const lockDelay = {
  ...base,
  /**
   * The base outcome plus whether the late writes drained before B was granted (`drain`),
   * and each one's fate (`late`: its token and time, who wrote over it and when, if anyone).
   */
  outcome: (w) => {
    const v = drainVerdict(w);
    return {
      ...base.outcome(w),
      drain: v.kind,
      late: v.late.map((x) => ({ token: x.row.token, t: x.row.t, drained: x.drained, over: x.over ? { by: x.over.by, t: x.over.t } : null })),
    };
  },
};
