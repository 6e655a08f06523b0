// Scene 3: leader election with the same mechanism. The fencing token is the epoch; the old
// leader's action bounces off a FenceGate downstream.

import { nextTime, tickAll, heartbeat, heartbeats, deadlineOf, milestone, whoseSession } from './common.js';
import { applyFact, facts, recordOutputs, highestBefore, newerGrant, storeVerdict } from './facts.js';

const ELECTION = 'election/orders-primary';
const IDS = ['N1', 'N2', 'N3'];
const ctx = { node: 'svc', store: 'db', lock: ELECTION, hb: 3 };
const PAUSE_AT = 5;

function setup(w, emit, P) {
  emit({ op: 'node', create: true, node: 'svc', label: 'Lock service' });
  emit({ op: 'store', create: true, store: 'db', label: 'Orders DB', resource: 'orders', lock: ELECTION, node: 'svc', fencing: P.fencing });
  for (const id of IDS) emit({ op: 'client', create: true, id, name: id, group: 'svc', keeper: { interval: 3, margin: 2 }, mem: { lastHb: 0, acts: 0 } });
  emit({ op: 'history', node: 'svc', lock: ELECTION, count: 6 });
  for (const id of IDS) emit({ op: 'core', node: 'svc', by: id, input: { type: 'openSession', ttl: P.ttl } });
  let g = null;
  for (const id of IDS) {
    const outs = emit({ op: 'core', node: 'svc', by: id, input: { type: 'campaign', session: w.clients[id].session, election: ELECTION } });
    recordOutputs(w, emit, outs);
    g ??= outs.find((o) => o.type === 'granted');
  }
  const leader = whoseSession(w, 'svc', g.session);
  milestone(w, emit, `${leader} leads, epoch ${g.token}`, [leader, 'svc']);
  emit({
    op: 'caption',
    text: `Every candidate campaigns for ${JSON.stringify(ELECTION)}: the election is the lock's acquire path, the winner is leader and the others wait in its queue. ` +
      `${leader} leads with epoch ${g.token}: the fencing token doubles as the epoch number, and every action it takes downstream carries it.`,
  });
}

function step(w, emit, P) {
  const t = nextTime(w, emit);
  if (t === 0) return setup(w, emit, P);
  const outs = tickAll(w, emit, t).svc || [];
  recordOutputs(w, emit, outs);
  const n1 = w.clients.N1;
  const ev = {
    acts: [],
    expired: outs.filter((o) => o.type === 'sessionExpired').map((o) => whoseSession(w, 'svc', o.session)),
    granted: outs.filter((o) => o.type === 'granted').map((o) => ({ token: o.token, id: whoseSession(w, 'svc', o.session) })),
    paused: false,
    rejoined: null,
    sent: null,
  };
  if (n1.status === 'paused' && n1.pausedBy === 'gc' && t === n1.mem.resumeAt) emit({ op: 'client', id: 'N1', set: { status: 'running', pausedBy: null } });
  const freeze = t === PAUSE_AT && n1.status === 'running' && n1.holding;
  for (const id of IDS) {
    const c = w.clients[id];
    if (c.mem.sent && c.mem.sentToken != null) {
      // The payoff's second beat: the action sent last step is on the wire, so it reaches the
      // DB with the epoch it was stamped with, whatever its sender has learnt or become since.
      const was = c.status === 'dead' ? 'dead' : c.lost ? 'knew' : null;
      emit({ op: 'write', store: 'db', by: id, token: c.mem.sentToken, data: `orders batch #${c.mem.acts + 1} (epoch ${c.mem.sentToken})` });
      emit({ op: 'client', id, mem: { acts: c.mem.acts + 1, nextAct: t + 2, prepared: null, sent: false, sentToken: null } });
      ev.acts.push({ id, row: w.stores.db.rows.at(-1), late: true, was });
    }
    if (c.status !== 'running') continue;
    if (c.holding && c.mem.ledSince == null) emit({ op: 'client', id, mem: { ledSince: t, nextAct: t } });
    // A leader acts every 2 s, each action stamped with its epoch (the token it believes it
    // holds), after checking its lease by its own clock (the core's SessionKeeper).
    const act = () => {
      emit({ op: 'write', store: 'db', by: id, token: c.token, data: `orders batch #${c.mem.acts + 1} (epoch ${c.token})` });
      emit({ op: 'client', id, mem: { acts: c.mem.acts + 1, nextAct: t + 2, prepared: null, sent: false } });
      ev.acts.push({ id, row: w.stores.db.rows.at(-1), late: false });
    };
    if (c.holding && c.token != null && c.mem.prepared && !c.mem.sent) {
      // the payoff's first beat: the woken leader sends what it prepared; the DB answers next step
      emit({ op: 'client', id, mem: { sent: true, sentToken: c.token } });
      emit({ op: 'flash', from: id, to: 'db', label: `epoch ${c.token}`, kind: 'msg' });
      const token = c.token;
      // its renewal thread wakes too and sends the keep-alive that fell due while it slept
      // (only if one is due: a short pause may have missed none)
      const before = deadlineOf(w, 'svc', w.clients[id]);
      heartbeat(w, emit, id, ctx);
      const after = deadlineOf(w, 'svc', w.clients[id]);
      ev.sent = { id, token, expired: facts(w).expiries.some((e) => e.id === id), lost: w.clients[id].lost, renewed: after != null && after !== before ? after : null };
      continue;
    }
    if (c.holding && c.token != null && !c.mem.steppedDown && t >= (c.mem.nextAct ?? t)) {
      const lease = w.lease(id);
      if (lease && lease.state !== 'safe') {
        emit({ op: 'client', id, mem: { steppedDown: t } });
        emit({ op: 'note', src: c.name, text: `${c.name}'s lease by its own clock: ${lease.state} — it stops acting as leader`, cls: 'warn' });
        ev.stepped = { id, lease };
      } else if (freeze && id === 'N1') {
        // the check passed; the pause strikes between the check and the send
        emit({ op: 'client', id, mem: { prepared: true } });
        emit({ op: 'client', id, set: { status: 'paused', pausedBy: 'gc' }, mem: { resumeAt: t + P.pause } });
        ev.paused = { lease };
        continue;
      } else act();
    }
    if (c.inbox.length) emit({ op: 'inbox', id });
    if (c.lost && c.mem.rejoinedAt == null) {
      // It learnt it is no longer leader: a fresh session, and back into the election.
      emit({ op: 'core', node: 'svc', by: id, input: { type: 'openSession', ttl: P.ttl } });
      const q = emit({ op: 'core', node: 'svc', by: id, input: { type: 'campaign', session: w.clients[id].session, election: ELECTION } });
      recordOutputs(w, emit, q);
      emit({ op: 'client', id, set: { lost: false }, mem: { rejoinedAt: t, ledSince: null, lastHb: t } });
      ev.rejoined = { id, out: q[0] };
    }
    heartbeat(w, emit, id, ctx);
  }
  const said = caption(w, ev, P);
  const survived = n1.mem.rejoinedAt == null && n1.status === 'running' && t >= PAUSE_AT + P.pause + 4;
  const cap = Math.max(40, PAUSE_AT + P.pause + 3 * P.ttl);
  // a leader the core lists whose process is dead is not an ending: wait for its expiry
  const l = w.nodes.svc.core.leader(ELECTION);
  const liveLeader = !l || w.clients[w.sessions[`svc:${l.session}`]]?.status === 'running';
  const over = (n1.mem.rejoinedAt != null && t >= n1.mem.rejoinedAt + 2 && liveLeader) || survived || t >= cap;
  if (over) {
    milestone(w, emit, 'outcome', said?.focus ?? ['db'], true);
    emit({ op: 'caption', text: (said?.focus ? `${said.text} ` : '') + ending(w, P) });
    emit({ op: 'done' });
    return;
  }
  if (said?.focus) milestone(w, emit, said.label, said.focus);
  if (said) emit({ op: 'caption', text: said.text });
}

function leaderNow(w) {
  const l = w.nodes.svc.core.leader(ELECTION);
  return l ? `${w.sessions[`svc:${l.session}`]} leads with epoch ${l.epoch}` : 'nobody leads right now';
}

/** Why N1, whose session expired, sent nothing stale afterwards. */
function whyQuiet(w, id) {
  const c = w.clients[id];
  if (c.status === 'dead') return `${id} was killed`;
  if (c.status === 'paused') return `${id} is still paused (resume it earlier on the timeline to see its late action)`;
  if (c.mem.steppedDown != null) return `${id}'s own clock told it to step down before it acted`;
  return `${id} learnt it was no longer leader before it acted`;
}

/** The ending, from the DB's rows, the recorded grants and expiries, and the clients. */
function ending(w, P) {
  const s = w.stores.db;
  const v = storeVerdict(w, 'db');
  const out = [];
  for (const r of v.refused) out.push(`${r.by}'s action with epoch ${r.token} bounced: the orders DB had already seen epoch ${r.highest} (${r.token} < ${r.highest}).`);
  for (const r of v.stale) {
    const g = newerGrant(w, r.token, r.t);
    const who = g ? ` although ${g.id} had been elected with epoch ${g.token}` : '';
    if (!s.fencing) out.push(`${r.by}'s action with epoch ${r.token} landed${who}: two leaders acted (split brain), and the DB checks no epoch.`);
    else out.push(`${r.by}'s action with epoch ${r.token} was accepted${who}: the DB had seen no epoch above ${highestBefore(s, r) ?? r.token}${g ? ` — ${g.id} never acted with ${g.token} before it` : ''}, and a fence can only refuse an epoch lower than one it has seen.`);
  }
  if (!v.refused.length && !v.stale.length) {
    const expired = [...new Set(facts(w).expiries.map((e) => e.id))];
    if (!expired.length) {
      const pauses = w.spans.filter((sp) => sp.kind === 'pause');
      out.push(`No session expired${pauses.length ? ` (${pauses.map((sp) => `${sp.lane} was paused ${(sp.to ?? w.t) - sp.from} s`).join(', ')}, less than the ${P.ttl} s session timeout)` : ''}: one leader throughout. A longer pause would have produced two self-believed leaders — and only the epoch check downstream keeps that harmless.`);
    } else {
      out.push(`No stale action reached the DB: ${expired.map((id) => whyQuiet(w, id)).join('; ')}. ${s.fencing ? 'The DB checked every epoch anyway.' : 'Nothing checked the epochs: luck, not design.'}`);
    }
  }
  out.push(`Now ${leaderNow(w)}.`);
  if (v.refused.length)
    out.push(`A leader that loses contact must stop acting before its session could expire, by its own clock — but a pause can strike between that check and the act, which is why the epoch travels with every action and the downstream check has the last word.`);
  else if (v.stale.length && !s.fencing) out.push('Turn on "downstream checks the epoch" and replay.');
  return `Outcome: ${out.join(' ')}`;
}

/** This step's caption; {text, label, focus} when the step is a milestone. */
function caption(w, ev, P) {
  const s = w.stores.db;
  if (ev.sent) {
    const { id, token } = ev.sent;
    return {
      label: `${id} sends epoch ${token}`,
      focus: [id],
      text: ev.sent.expired
        ? `${id} wakes. It still believes it leads with epoch ${token} — its lease check passed before the pause — and sends the action it prepared, stamped epoch ${token}. Its session expired while it slept.` +
          (ev.sent.lost ? ` Its overdue keep-alive, sent as it wakes, is refused: now ${id} knows it no longer leads — but the action has already left.` : '')
        : `${id} wakes within its session timeout, still leader, and sends the action it prepared with epoch ${token}${ev.sent.renewed != null ? `; its overdue keep-alive goes out too and the service extends the session to t=${ev.sent.renewed}` : ''}.`,
    };
  }
  const act = ev.acts.find((a) => a.late) || ev.acts.find((a) => w.clients[a.id].mem.ledSince === w.t) || ev.acts[0] || null;
  if (act && act.late) {
    const r = act.row;
    const g = newerGrant(w, r.token, r.t);
    if (!r.accepted)
      return {
        label: `epoch ${r.token} bounced`,
        focus: ['db', act.id],
        text: `${r.token} < ${r.highest}: bounced. Downstream systems reject epoch n once they have seen a higher one, so the old leader's action is refused; ` +
          (act.was === 'dead' ? `${act.id} is dead, but its action was already on the wire.` : act.was === 'knew' ? `${act.id} had learnt it was no longer leader after it sent the action — too late to call it back.` : `${act.id} learns it is no longer leader.`) +
          ' A brief overlap of two self-believed leaders is tolerable.',
      };
    if (r.stale && !s.fencing) return { label: `epoch ${r.token} lands`, focus: ['db'], text: `The orders DB checks nothing: ${act.id}'s action with epoch ${r.token} lands${g ? ` although ${g.id} leads with epoch ${g.token}` : ''} — two leaders acted (split brain).` };
    if (r.stale)
      return { label: `epoch ${r.token} accepted`, focus: ['db'], text: `Accepted — yet ${act.id} no longer leads${g ? ` (${g.id} was elected with epoch ${g.token})` : ''}. The DB's highest epoch was ${highestBefore(s, r) ?? r.token}: ${g ? g.token : 'the newer epoch'} never reached it, so it had nothing higher to refuse against.` };
    return { label: `epoch ${r.token} ok`, focus: ['db'], text: `Accepted: ${act.id}'s session never expired, so it is still leader and its action with epoch ${r.token} is legitimate.` };
  }
  if (ev.rejoined) {
    const o = ev.rejoined.out;
    return { label: `${ev.rejoined.id} rejoins`, focus: [ev.rejoined.id], text: `${ev.rejoined.id} opens a new session and campaigns again: ${o?.type === 'queued' ? `it waits in the queue (position ${o.position})` : o?.type === 'granted' ? `it leads again, with epoch ${o.token}` : 'the service answers'}.` };
  }
  if (ev.paused)
    return { label: 'N1 pauses', focus: ['N1'], text: `N1 checks its lease by its own clock (safe until t=${ev.paused.lease?.until}), prepares an action stamped epoch ${w.clients.N1.token} — and freezes in a ${P.pause}-second stop-the-world pause before sending it. Its heartbeats stop.` };
  if (ev.stepped) return { label: `${ev.stepped.id} steps down`, focus: [ev.stepped.id], text: `${ev.stepped.id}'s own clock says its lease is ${ev.stepped.lease.state}: it steps down and stops acting — a gap with no leader rather than two leaders.` };
  if (ev.expired.length) {
    const g = ev.granted[0];
    const x = ev.expired[0];
    const c = x && w.clients[x];
    const state = !c ? '' : c.status === 'dead' ? `${x} is dead` : c.status === 'paused' ? `${x} is paused and still believes it leads` : `${x} stopped heartbeating`;
    return {
      label: g ? `${g.id} leads, epoch ${g.token}` : `${x} expires`,
      focus: g ? ['svc', g.id, ...(act && act.id === g.id ? ['db'] : [])] : ['svc'],
      text: `${ev.expired.join(' and ')}'s session expires (no heartbeat within the ${P.ttl} s session timeout; ${state}). ` +
        (g ? `The next waiter is promoted with the next epoch: ${g.id} leads with epoch ${g.token}.` : 'Nobody is waiting to take over.') +
        (g && act && act.id === g.id ? ` It acts at once: ${s.fencing ? `the orders DB now has epoch ${act.row.token} as the highest it has seen` : 'the orders DB takes its action without looking'}.` : ''),
    };
  }
  if (ev.granted.length) {
    const g = ev.granted[0];
    return { label: `${g.id} leads, epoch ${g.token}`, focus: ['svc', g.id], text: `${g.id} is promoted: it leads with epoch ${g.token}.` };
  }
  if (act) {
    const first = w.stores.db.rows.filter((r) => r.byId === act.id && r.token === act.row.token).length === 1;
    const text = `${act.id} acts downstream with epoch ${act.row.token}. ${s.fencing ? `The orders DB records epoch ${act.row.token} as the highest it has seen.` : 'The orders DB takes it without looking.'}`;
    return first && act.row.token !== facts(w).grants[0]?.token ? { label: `DB sees ${act.row.token}`, focus: ['db'], text } : { text };
  }
  const n1 = w.clients.N1;
  if (n1.status === 'paused' && n1.pausedBy === 'gc') {
    const d = deadlineOf(w, 'svc', n1);
    return {
      text: d != null
        ? `N1 is frozen; ${othersNow(w)}. The service will expire N1's session at t=${d} unless a heartbeat arrives.`
        : `${leaderActs(w)} N1 is still frozen, an old leader that does not know it.`,
    };
  }
  return null;
}

const and = (ids) => ids.join(' and ');

/** What N2 and N3 do while N1 is frozen: from their status and the core's wait queue. */
function othersNow(w) {
  const others = IDS.filter((id) => id !== 'N1');
  const queued = w.nodes.svc.core.waiters(ELECTION).map((q) => whoseSession(w, 'svc', q.session));
  const of = (pred) => others.filter((id) => pred(w.clients[id], id));
  const waiting = of((c, id) => heartbeats(c) && queued.includes(id));
  const beating = of((c, id) => heartbeats(c) && !queued.includes(id));
  const paused = of((c) => c.status === 'paused');
  const dead = of((c) => c.status === 'dead');
  const idle = of((c) => c.status === 'running' && !heartbeats(c));
  const parts = [];
  if (waiting.length) parts.push(`${and(waiting)} ${waiting.length > 1 ? 'heartbeat and wait' : 'heartbeats and waits'}`);
  if (beating.length) parts.push(`${and(beating)} ${beating.length > 1 ? 'heartbeat' : 'heartbeats'}`);
  if (paused.length) parts.push(`${and(paused)} ${paused.length > 1 ? 'are' : 'is'} paused too`);
  if (dead.length) parts.push(`${and(dead)} ${dead.length > 1 ? 'are' : 'is'} dead`);
  if (idle.length) parts.push(`${and(idle)} no longer ${idle.length > 1 ? 'heartbeat' : 'heartbeats'}`);
  return parts.join('; ');
}

/** The leader the core lists, and whether its process can act (it may be dead or paused). */
function leaderActs(w) {
  const l = w.nodes.svc.core.leader(ELECTION);
  if (!l) return 'Nobody leads right now.';
  const id = whoseSession(w, 'svc', l.session);
  const c = id && w.clients[id];
  if (!c) return `${leaderNow(w)}.`;
  if (c.status === 'dead') return `The service still lists ${id} as leader with epoch ${l.epoch}, but ${id} is dead: no leader acts now.`;
  if (c.status === 'paused') return `${id} leads with epoch ${l.epoch}, but it is paused: it does not act.`;
  if (c.mem.steppedDown != null) return `${id} leads with epoch ${l.epoch}, but its own clock told it to step down: it does not act.`;
  return `${id} leads with epoch ${l.epoch} and acts with it.`;
}

export const election = {
  key: 'election',
  title: '3 · Leader election',
  short: 'Election',
  lede: 'Election is the acquire path: an exclusive acquire that waits. The fencing token doubles as the epoch number.',
  fencingSwitch: true,
  lock: ELECTION,
  tryThis: [
    'Turn the epoch check off: the old leader\'s action lands (split brain).',
    "Make N1's pause 6 s: shorter than the timeout, it stays leader.",
    'Kill N2 after it is promoted: N3 becomes leader with the next epoch.',
  ],
  params: {
    fencing: { label: 'downstream checks the epoch', type: 'switch', value: true },
    ttl: { label: 'session timeout', type: 'range', min: 6, max: 20, step: 1, value: 10, unit: 's' },
    pause: { label: "old leader's pause", type: 'range', min: 2, max: 30, step: 1, value: 14, unit: 's' },
  },
  lanes: [...IDS.map((id) => ({ id, label: id })), { id: 'svc', label: 'Lock service' }, { id: 'db', label: 'Orders DB' }],
  clients: IDS,
  step,
  apply: applyFact,
  verdict: (w) => storeVerdict(w, 'db'),
  outcome(w) {
    const l = w.nodes.svc.core.leader(ELECTION);
    const rows = w.stores.db.rows;
    return {
      leader: l ? w.sessions[`svc:${l.session}`] : null,
      epoch: l ? l.epoch : null,
      bounced: rows.filter((r) => !r.accepted).map((r) => ({ by: r.byId, token: r.token, highest: r.highest })),
      stale: rows.filter((r) => r.accepted && r.stale).map((r) => r.token),
      corrupted: storeVerdict(w, 'db').corrupted,
      fencing: w.stores.db.fencing,
      expired: facts(w).expiries.length > 0,
      highest: w.highest('db'),
    };
  },
  layout: (w, narrow) =>
    narrow
      ? {
          width: 400,
          height: 584,
          nodes: [
            { id: 'N1', kind: 'client', x: 30, y: 28, small: true, side: 'right' },
            { id: 'N2', kind: 'client', x: 30, y: 84, small: true, side: 'right' },
            { id: 'N3', kind: 'client', x: 30, y: 140, small: true, side: 'right' },
            { id: 'svc', kind: 'service', x: 200, y: 272, lock: ELECTION, w: 300 },
            { id: 'db', kind: 'store', x: 200, y: 473 },
          ],
        }
      : {
    height: 350,
    nodes: [
      { id: 'N1', kind: 'client', x: 110, y: 52 },
      { id: 'N2', kind: 'client', x: 110, y: 165 },
      { id: 'N3', kind: 'client', x: 110, y: 278 },
      { id: 'svc', kind: 'service', x: 400, y: 170, lock: ELECTION },
      { id: 'db', kind: 'store', x: 690, y: 170 },
    ],
  },
};
