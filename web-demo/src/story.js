// The story layer: which steps are milestones, what the caption dock shows, and the terms a
// learner meets. It reads the recorded timeline and the World; it decides nothing about locks.

/** The circled number of milestone n (① … ⑳), or a square for the outcome. */
export function milestoneMark(n) {
  if (n == null) return '■';
  return n >= 1 && n <= 20 ? String.fromCodePoint(0x245f + n) : `(${n})`;
}

/**
 * One sentence for each term, shown under the caption at the step where the term first
 * appears in a caption of this run. A fourth element names the one scene a definition is
 * for; a term defined for the scene shown replaces its general definition there.
 */
export const TERMS = [
  ['fencing token', /fencing token|fenceToken/i, 'A fencing token is a number the lock service hands out with every grant, larger than every one before it; the protected resource refuses a write whose token is lower than one it has already seen.'],
  ['wait queue', /wait queue/i, "The wait queue is the lock service's ordered list of clients waiting for a held lock: on release it grants the lock to the first of them and wakes no one else."],
  ['session timeout', /session timeout|\blease\b/i, 'A session is a client\'s registration with the lock service, kept alive by heartbeats; if none arrives within the session timeout (the lease), the service expires the session and releases its locks.'],
  ['own clock', /own clock/i, "A client's own clock is its SessionKeeper, the client-side half of the core: from the heartbeats it sent and had answered, it tells the client how long its lease is surely valid (safe), nearly over (jeopardy) or possibly gone (expired) — without asking the service."],
  ['revision', /\brevision\b/i, "The lock service's revision is the highest token it has granted so far (or higher, if its host raised it to skip tokens); the next grant gets a higher one, so tokens only grow, even across expiries."],
  ['stop-the-world pause', /stop-the-world|GC pause|garbage-collection/i, 'A stop-the-world pause (garbage collection, swapping, a suspended VM) freezes the whole process: it neither works nor heartbeats nor notices that time passed.'],
  ['epoch', /\bepoch\b/i, "In an election the winner's fencing token is its epoch: each new leader gets a larger one, and downstream systems refuse an action stamped with an older epoch."],
  ['thundering herd', /thundering herd/i, 'A thundering herd: every waiter is woken for one free slot, all of them race, and all but one lose and go back to waiting.'],
  ['try-lock', /try-lock/i, 'A try-lock asks for the lock without waiting: the answer is "granted" or "busy".'],
  ['majority', /majority/i, 'A majority (2 of 3 replicas) must have applied an entry before it is acknowledged, so any later majority — and the leader it elects — includes a replica that has it.'],
  // Redlock's words mean something else: its nodes share nothing, and its clients have no keeper.
  ['own clock', /own clock/i, "Each Redlock node's own clock decides when a key on it expires, and the client's own clock when its validity runs out; nothing keeps the clocks in step, and a clock that jumps ends a key early.", 'redlock'],
  ['majority', /majority/i, "Redlock's majority is 3 of 5 independent nodes, each granting on its own: no log, no replication, no leader — a node that forgets a key (a restart, a clock jump) can grant it to another client.", 'redlock'],
  ['asynchronous replication', /asynchronous/i, 'Asynchronous replication: the primary answers the client first and ships the change to its replica later, so a crash in between loses an acknowledged change.'],
];

/** The caption text of each step 1..length (a step without a caption record keeps the last). */
export function captionsOf(timeline) {
  const out = [];
  let last = '';
  for (const records of timeline.steps) {
    for (const r of records) if (r.op === 'caption') last = r.text;
    out.push(last);
  }
  return out;
}

/** The terms of scene `scene`: its own definitions, and the general ones it has none for. */
export function termsOf(scene) {
  const own = TERMS.filter(([, , , only]) => only === scene);
  return TERMS.filter(([term, , , only]) => (only == null && !own.some(([t]) => t === term)) || only === scene);
}

/**
 * The definitions to show at step `cursor` (1-based) of scene `scene`: terms whose first
 * caption use is here.
 */
export function termsAt(captions, cursor, scene) {
  const now = captions[cursor - 1] ?? '';
  return termsOf(scene)
    .filter(([, re]) => re.test(now) && !captions.slice(0, cursor - 1).some((c) => re.test(c)))
    .map(([term, , def]) => ({ term, def }));
}
