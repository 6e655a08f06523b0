// Scenes 1 and 5: a holder paused past its session's expiry, a second client granted the
// lock, and the storage that either checks the fencing token (a real FenceGate) or not.

import { nextTime, tickAll, runWorker, deadlineOf } from './common.js';

/**
 * Builds a pause scene. `cfg` holds the names, numbers and the captions (the seeds' words).
 */
export function pauseScene(cfg) {
  const [A, B] = cfg.ids;
  const ctx = { node: 'svc', store: 'store', lock: cfg.lock, hb: cfg.hb };

  function setup(w, emit, P) {
    emit({ op: 'node', create: true, node: 'svc', label: 'Lock service' });
    emit({ op: 'store', create: true, store: 'store', label: cfg.storeLabel, resource: cfg.resource, lock: cfg.lock, node: 'svc', fencing: P.fencing, http: cfg.http });
    const keeper = { interval: cfg.hb, margin: cfg.margin };
    emit({ op: 'client', create: true, id: A, name: A, group: 'svc', keeper, mem: { jobs: cfg.jobsA, lastHb: 0, checksLease: cfg.checksLease } });
    emit({ op: 'client', create: true, id: B, name: B, group: 'svc', keeper, mem: { jobs: cfg.jobsB, lastHb: 0, checksLease: cfg.checksLease } });
    emit({ op: 'history', node: 'svc', lock: cfg.lock, count: cfg.history });
    emit({ op: 'core', node: 'svc', by: A, input: { type: 'openSession', ttl: P.ttl } });
    emit({ op: 'core', node: 'svc', by: B, input: { type: 'openSession', ttl: P.ttl } });
    const ga = emit({ op: 'core', node: 'svc', by: A, input: { type: 'acquire', session: w.clients[A].session, lock: cfg.lock, mode: 'exclusive', wait: 'forever' } });
    const gb = emit({ op: 'core', node: 'svc', by: B, input: { type: 'acquire', session: w.clients[B].session, lock: cfg.lock, mode: 'exclusive', wait: 'forever' } });
    const tokA = ga.find((o) => o.type === 'granted')?.token;
    const posB = gb.find((o) => o.type === 'queued')?.position;
    emit({ op: 'caption', text: cfg.text.start(tokA, posB, P) });
  }

  function step(w, emit, P) {
    const t = nextTime(w, emit);
    if (t === 0) return setup(w, emit, P);
    const ev = { expired: [], granted: [], writes: [], pausedNow: false, resumedNow: false, renewedA: false };
    const outs = tickAll(w, emit, t).svc || [];
    for (const o of outs) {
      if (o.type === 'sessionExpired') ev.expired.push(o);
      if (o.type === 'granted') ev.granted.push(o);
    }
    const a = w.clients[A];
    if (a.status === 'paused' && a.pausedBy === 'gc' && t === a.mem.resumeAt) {
      emit({ op: 'client', id: A, set: { status: 'running', pausedBy: null } });
      ev.resumedNow = true;
    }
    // The scripted stop-the-world pause (skipped if you already paused or killed A). It
    // strikes after A's lease check and before the write it was about to do.
    const freeze = t === cfg.pauseAt && a.status === 'running' && !a.mem.finished;
    const wctx = { ...ctx, freezeAfterCheck: (_, id) => freeze && id === A };
    for (const id of [A, B]) {
      const did = runWorker(w, emit, id, wctx);
      for (const d of did) {
        if (d.kind === 'write') ev.writes.push({ id, ...d });
        if (d.kind === 'prepared') ev.prepared = d;
        if (d.kind === 'stepped-down') ev.steppedDown = { id, ...d };
        for (const o of d.outs || []) if (o.type === 'granted') ev.granted.push(o);
      }
    }
    if (freeze && w.clients[A].status === 'running') {
      emit({ op: 'client', id: A, set: { status: 'paused', pausedBy: 'gc' }, mem: { resumeAt: t + P.pause } });
      ev.pausedNow = true;
    }
    ev.renewedA = ev.resumedNow && !w.clients[A].lost && w.clients[A].holding;
    const text = cfg.text.step(w, ev, P, { A, B, deadline: (id) => deadlineOf(w, 'svc', w.clients[id]) });
    if (text) emit({ op: 'caption', text });
    // Over when nobody runs with work left and no scripted resume is pending. A client you
    // paused stays paused: resume it earlier on the timeline to see what it would do.
    const working = [A, B].some((id) => w.clients[id].status === 'running' && !w.clients[id].mem.finished);
    const gcPending = [A, B].some((id) => w.clients[id].status === 'paused' && w.clients[id].pausedBy === 'gc');
    if ((!working && !gcPending) || t >= cfg.maxT) {
      const still = [A, B].filter((id) => w.clients[id].status === 'paused' && !w.clients[id].mem.finished);
      const note = still.length ? ` (${still.join(' and ')} ${still.length > 1 ? 'are' : 'is'} still paused: scrub back and resume ${still.length > 1 ? 'them' : 'it'} to see the rest.)` : '';
      emit({ op: 'caption', text: cfg.text.end(w, P, { A, B }) + note });
      emit({ op: 'done' });
    }
  }

  function outcome(w) {
    const s = w.stores.store;
    return {
      accepted: s.rows.filter((r) => r.accepted).map((r) => r.token),
      refused: s.rows.filter((r) => !r.accepted).map((r) => ({ token: r.token, highest: r.highest })),
      corrupted: s.corrupted,
      highest: w.highest('store'),
    };
  }

  return {
    ...cfg.meta,
    params: cfg.params,
    lock: cfg.lock,
    lanes: [
      { id: A, label: `Client ${A}` },
      { id: B, label: `Client ${B}` },
      { id: 'svc', label: 'Lock service' },
      { id: 'store', label: cfg.storeLabel },
    ],
    clients: [A, B],
    step,
    outcome,
    layout: (w, narrow) =>
      narrow
        ? {
            width: 400,
            height: 550,
            nodes: [
              { id: A, kind: 'client', x: 110, y: 50 },
              { id: B, kind: 'client', x: 290, y: 50 },
              { id: 'svc', kind: 'service', x: 200, y: 235, lock: cfg.lock },
              { id: 'store', kind: 'store', x: 200, y: 445 },
            ],
          }
        : {
            nodes: [
              { id: A, kind: 'client', x: 110, y: 70 },
              { id: B, kind: 'client', x: 110, y: 210 },
              { id: 'svc', kind: 'service', x: 400, y: 140, lock: cfg.lock },
              { id: 'store', kind: 'store', x: 690, y: 140 },
            ],
          },
  };
}
