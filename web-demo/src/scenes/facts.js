// Facts of a run, for the captions: the grants and expiries the core output (recorded as they
// arrive, through the scene's own `custom` records) and what the storage decided (its rows).
// Captions and endings are written from these, so they agree with the run whatever you did.

import { whoseSession } from './common.js';

/** Scene-owned state changes (World.apply routes `{op: 'custom'}` here). */
export function applyFact(w, r) {
  if (r.kind !== 'fact') throw new Error(`unknown scene op ${r.kind}`);
  w.custom.facts ??= { grants: [], expiries: [] };
  w.custom.facts[r.list].push({ t: w.t, ...r.fact });
}

export const facts = (w) => w.custom.facts ?? { grants: [], expiries: [] };

/**
 * Records the grants and expiries among a core's outputs as facts of this run. With `lock`,
 * an expiry also keeps the lock-delay the core then holds `lock` back for (`delayUntil`).
 */
export function recordOutputs(w, emit, outs, lock = null) {
  for (const o of outs || []) {
    const id = whoseSession(w, 'svc', o.session);
    if (o.type === 'granted') emit({ op: 'custom', kind: 'fact', list: 'grants', fact: { token: o.token, id } });
    if (o.type === 'sessionExpired') {
      const until = lock ? w.nodes.svc.core.lockDelayUntil(lock) : null;
      emit({ op: 'custom', kind: 'fact', list: 'expiries', fact: until != null ? { id, delayUntil: Number(until) } : { id } });
    }
  }
}

/** The gate's highest token when `row` arrived (its FenceGate's answer, kept with the
 * row by World.applyWrite; null if it had seen none, or the store has no gate). */
export function highestBefore(s, row) {
  return row.highestBefore ?? null;
}

/** The latest grant of a token above `token` made at or before `t` (null if none). */
export function newerGrant(w, token, t) {
  return facts(w).grants.filter((g) => g.token > token && g.t <= t).at(-1) ?? null;
}

/**
 * What the storage's decisions add up to, from its rows and the recorded grants:
 * `refused` (the gate said stale), `stale` (accepted although the lock service had granted a
 * newer token), `corrupted` (a stale write's data sits beside or over another writer's).
 */
export function storeVerdict(w, storeName = 'store') {
  const s = w.stores[storeName];
  const refused = s.rows.filter((r) => !r.accepted);
  const stale = s.rows.filter((r) => r.accepted && r.stale);
  const writers = new Set(Object.values(s.contents).map((v) => v.by));
  const staleParts = Object.values(s.contents).filter((v) => v.stale);
  const corrupted = staleParts.length > 0 && writers.size > 1;
  const kind = corrupted ? 'corrupted' : stale.length ? 'stale' : refused.length ? 'fenced' : 'ok';
  return { refused, stale, corrupted, kind };
}

