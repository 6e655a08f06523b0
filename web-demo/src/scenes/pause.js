// Scenes 1 and 5: a holder paused past its session's expiry, a second client granted the
// lock, and the storage that either checks the fencing token (a real FenceGate) or not.
//
// Every caption is written from what this run did: the core's outputs (grants, expiries)
// are recorded as facts when they arrive, and the storage's decisions are its rows. So an
// intervention (a kill, an early resume) changes the words with the picture.

import { nextTime, tickAll, runWorker, heartbeat, heartbeats, deadlineOf, milestone, whoseSession } from './common.js';
import { applyFact as apply, facts, recordOutputs, highestBefore, newerGrant, storeVerdict } from './facts.js';

/**
 * Builds a pause scene. `cfg` holds the names, numbers and the scene's own words.
 */
export function pauseScene(cfg) {
  const [A, B] = cfg.ids;
  const ctx = { node: 'svc', store: 'store', lock: cfg.lock, hb: cfg.hb };
  const W = cfg.words; // {store, token, refused, accepted}

  function setup(w, emit, P) {
    emit({ op: 'node', create: true, node: 'svc', label: 'Lock service', config: { lockDelay: P.delay ?? 0 } });
    emit({ op: 'store', create: true, store: 'store', label: cfg.storeLabel, resource: cfg.resource, lock: cfg.lock, node: 'svc', fencing: P.fencing, http: cfg.http });
    const keeper = { interval: cfg.hb, margin: cfg.margin };
    emit({ op: 'client', create: true, id: A, name: A, group: 'svc', keeper, mem: { jobs: cfg.jobsA, lastHb: 0, checksLease: cfg.checksLease } });
    emit({ op: 'client', create: true, id: B, name: B, group: 'svc', keeper, mem: { jobs: cfg.jobsB, lastHb: 0, checksLease: cfg.checksLease } });
    emit({ op: 'history', node: 'svc', lock: cfg.lock, count: cfg.history });
    emit({ op: 'core', node: 'svc', by: A, input: { type: 'openSession', ttl: P.ttl } });
    emit({ op: 'core', node: 'svc', by: B, input: { type: 'openSession', ttl: P.ttl } });
    const ga = emit({ op: 'core', node: 'svc', by: A, input: { type: 'acquire', session: w.clients[A].session, lock: cfg.lock, mode: 'exclusive', wait: 'forever' } });
    const gb = emit({ op: 'core', node: 'svc', by: B, input: { type: 'acquire', session: w.clients[B].session, lock: cfg.lock, mode: 'exclusive', wait: 'forever' } });
    recordOutputs(w, emit, ga);
    recordOutputs(w, emit, gb);
    const tokA = ga.find((o) => o.type === 'granted')?.token;
    const posB = gb.find((o) => o.type === 'queued')?.position;
    milestone(w, emit, `${A} gets ${tokA}`, [A, 'svc']);
    emit({ op: 'caption', text: cfg.text.start(tokA, posB, P) });
  }

  /** Why a client whose session expired never wrote after it (for the ending). */
  function whyNoLateWrite(w, id) {
    const c = w.clients[id];
    if (c.status === 'dead') {
      // a write it had sent before it was killed still landed (it was on the wire)
      const killed = w.marks.find((m) => m.lane === id && m.kind === 'crash')?.t;
      const after = w.stores.store.rows.filter((r) => r.byId === id && killed != null && r.t > killed);
      return after.length
        ? `${id} was killed at t=${killed} after sending its write with ${after.map((r) => r.token).join(', ')}, which landed at t=${after.map((r) => r.t).join(', ')} while its session was still alive, so nothing later came from it`
        : `${id} was killed, so it never wrote again`;
    }
    if (c.status === 'paused') {
      const since = w.spans.filter((sp) => sp.lane === id && sp.kind === 'pause').at(-1)?.from;
      const after = w.stores.store.rows.filter((r) => r.byId === id && since != null && r.t > since);
      return after.length
        ? `${id} is still paused; the write with ${after.map((r) => r.token).join(', ')} it had sent before the pause landed at t=${after.map((r) => r.t).join(', ')} while its session was still alive`
        : `${id} is still paused (resume it earlier on the timeline to see its late write)`;
    }
    if (c.mem.steppedDown) return `${id}'s own clock said its lease was no longer safe, so it stopped before writing`;
    if (c.lost) return `${id} learnt it had lost the lock before it wrote again`;
    return `${id} had nothing left to write`;
  }

  /** The ending, from the storage's rows, the recorded grants and expiries, and the clients. */
  function ending(w, P) {
    if (cfg.text.ending) return `Outcome: ${cfg.text.ending(w, P, storeVerdict(w), facts(w))}`;
    const s = w.stores.store;
    const v = storeVerdict(w);
    const f = facts(w);
    const out = [];
    for (const r of v.refused) {
      out.push(`${r.by}'s write with ${W.token} ${r.token} ${W.refusedVerb}: the ${W.store} had already seen ${r.highest} (${r.token} < ${r.highest}).`);
    }
    for (const r of v.stale) {
      const g = newerGrant(w, r.token, r.t);
      const who = g ? ` although the lock service had given the lock to ${g.id} (${W.token} ${g.token})` : ' although the lock service no longer listed its grant';
      if (!s.fencing) out.push(`${r.by}'s write with ${r.token} landed${who}: the ${W.store} checks no token.`);
      else {
        const hi = highestBefore(s, r);
        out.push(`${r.by}'s write with ${r.token} was accepted${who}: the ${W.store} had seen no token above ${hi ?? r.token}${g ? ` — ${g.token} never reached it before this write` : ''}, and a fence can only refuse a token lower than one it has seen.`);
      }
    }
    if (v.corrupted) out.push(`The resource now holds a stale writer's data beside another's: the data is corrupted.`);
    else if (v.stale.length) {
      // Did a stale write land over what a newer holder had written, and is it still there?
      const overwrote = v.stale.some((r) => s.rows.some((o) => o.accepted && !o.stale && o.part === r.part && o.token > r.token && o.t <= r.t));
      const still = Object.values(s.contents).some((c) => c.stale);
      out.push(overwrote
        ? `A write without the lock landed over the data of the writer that held it${still ? ', and the resource still holds it' : ': the resource was wrong until that writer wrote again, and anything that read it in between took stale data as current'}.`
        : `Nothing of another writer's was overwritten this time, but a write without the lock landed.`);
    }
    if (!v.refused.length && !v.stale.length) {
      const expired = [...new Set(f.expiries.map((e) => e.id))];
      if (!expired.length) {
        const pauses = w.spans.filter((sp) => sp.kind === 'pause');
        const said = pauses.map((sp) => `${sp.lane} was paused ${(sp.to ?? w.t) - sp.from} s (t=${sp.from}–${sp.to ?? w.t})`);
        out.push(`No session expired${said.length ? `: ${said.join(', ')} — less than the ${P.ttl} s session timeout` : ''}, so the lock never changed hands behind a holder's back.`);
        if (pauses.length) out.push(`A pause has no upper bound, though: a longer one would not be this lucky.`);
      } else {
        out.push(`No stale write reached the ${W.store}: ${expired.map((id) => whyNoLateWrite(w, id)).join('; ')}.`);
        out.push(s.fencing ? `The ${W.store} checked every ${W.token} anyway.` : `Nothing checked the tokens: that was luck, not design.`);
      }
    }
    if (v.refused.length) out.push(cfg.text.lesson);
    else if (v.stale.length && !s.fencing) out.push(`${cfg.text.unfencedLesson ? `${cfg.text.unfencedLesson} ` : ''}Turn on "${cfg.params.fencing.label}" and replay.`);
    return `Outcome: ${out.join(' ')}`;
  }

  function step(w, emit, P) {
    const t = nextTime(w, emit);
    if (t === 0) return setup(w, emit, P);
    const ev = { expired: [], granted: [], writes: [], released: [], pausedNow: false, sent: null, heldBy: [], queued: [] };
    // who the core had in the lock's queue before this tick (an expiry drops a waiter from it)
    ev.queued = w.nodes.svc.core.waiters(cfg.lock).map((q) => whoseSession(w, 'svc', q.session));
    const outs = tickAll(w, emit, t).svc || [];
    recordOutputs(w, emit, outs, cfg.lock);
    for (const o of outs) {
      if (o.type === 'sessionExpired') ev.expired.push(whoseSession(w, 'svc', o.session));
      if (o.type === 'granted') ev.granted.push({ token: o.token, id: whoseSession(w, 'svc', o.session) });
      if (o.type === 'released' && o.reason === 'expired') ev.heldBy.push(whoseSession(w, 'svc', o.session));
    }
    const a = w.clients[A];
    if (a.status === 'paused' && a.pausedBy === 'gc' && t === a.mem.resumeAt) {
      emit({ op: 'client', id: A, set: { status: 'running', pausedBy: null } });
      ev.resumed = { id: A, from: t - P.pause };
    }
    // The scripted stop-the-world pause (skipped if you already paused or killed A). It
    // strikes after A's lease check and before the write it was about to do.
    const freeze = t === cfg.pauseAt && a.status === 'running' && !a.mem.finished;
    const wctx = { ...ctx, freezeAfterCheck: (_, id) => freeze && id === A };
    for (const id of [A, B]) {
      const c = w.clients[id];
      const idx = c.mem.next ?? 0;
      const job = c.mem.jobs[idx];
      const due = job ? (job.at != null ? job.at : c.grantedAt != null ? c.grantedAt + job.rel : Infinity) : Infinity;
      // a write prepared before a pause, or (for a client that does not check its lease
      // before acting) one that fell due while it was paused
      const late = c.mem.prepared === idx || (!c.mem.checksLease && t > due);
      if (c.status === 'running' && late && c.token != null && c.mem.sent !== idx && job?.do === 'write' && !c.lost) {
        // The payoff's first beat: the woken client sends the write it prepared before the
        // pause, still believing its token; the storage's answer is the next step.
        emit({ op: 'client', id, mem: { sent: idx, sentToken: c.token } });
        emit({ op: 'flash', from: id, to: 'store', label: `write ${c.token}`, kind: 'msg' });
        const token = c.token;
        // Its renewal thread wakes too and sends the keep-alive that fell due while it slept:
        // it keeps a session the service still has, and its refusal tells a client whose
        // session is gone — after the write has left.
        // (Only if one is due: a short pause may have missed none.)
        const before = deadlineOf(w, 'svc', w.clients[id]);
        heartbeat(w, emit, id, ctx);
        const after = deadlineOf(w, 'svc', w.clients[id]);
        ev.sent = { id, token, part: job.part, expired: facts(w).expiries.some((e) => e.id === id), lost: w.clients[id].lost, renewed: after != null && after !== before ? after : null };
        continue;
      }
      const before = job?.part ? w.stores.store.contents[job.part] : null;
      if (c.mem.sent === idx && c.mem.sentToken != null && job?.do === 'write' && (c.lost || c.status !== 'running')) {
        // The second beat when the sender has meanwhile learnt it lost the lock, or was
        // killed or paused after sending: the write is already on the wire, so it reaches
        // the storage all the same. (A running sender that still holds delivers it below,
        // as its job's next write.)
        const was = c.status === 'dead' ? 'dead' : c.status === 'paused' ? 'paused' : null;
        emit({ op: 'write', store: 'store', by: id, token: c.mem.sentToken, data: job.data, part: job.part });
        const next = idx + 1;
        emit({ op: 'client', id, mem: { next, prepared: null, sentToken: null, finished: c.lost || was === 'dead' || next >= c.mem.jobs.length } });
        ev.writes.push({ id, kind: 'write', row: w.stores.store.rows.at(-1), late: true, before, knew: c.lost && was !== 'dead', was });
        continue;
      }
      const did = runWorker(w, emit, id, wctx);
      for (const d of did) {
        if (d.kind === 'write') ev.writes.push({ id, ...d, before });
        if (d.kind === 'prepared') ev.prepared = d;
        if (d.kind === 'stepped-down') {
          ev.steppedDown = { id, ...d };
          emit({ op: 'client', id, mem: { steppedDown: t } });
        }
        if (d.kind === 'release') ev.released.push(id);
        recordOutputs(w, emit, d.outs);
        for (const o of d.outs || []) if (o.type === 'granted') ev.granted.push({ token: o.token, id: whoseSession(w, 'svc', o.session) });
      }
    }
    if (freeze && w.clients[A].status === 'running') {
      emit({ op: 'client', id: A, set: { status: 'paused', pausedBy: 'gc' }, mem: { resumeAt: t + P.pause } });
      ev.pausedNow = true;
    }
    const said = caption(w, ev, P);
    // Over when nobody runs with work left and no scripted resume is pending. A client you
    // paused stays paused: resume it earlier on the timeline to see what it would do.
    const working = [A, B].some((id) => w.clients[id].status === 'running' && !w.clients[id].mem.finished);
    const gcPending = [A, B].some((id) => w.clients[id].status === 'paused' && w.clients[id].pausedBy === 'gc');
    const over = (!working && !gcPending) || t >= cfg.maxT;
    if (said?.focus && !over) milestone(w, emit, said.label, said.focus);
    if (over) {
      const still = [A, B].filter((id) => w.clients[id].status === 'paused' && !w.clients[id].mem.finished);
      const note = still.length ? ` (${still.join(' and ')} ${still.length > 1 ? 'are' : 'is'} still paused: scrub back and resume ${still.length > 1 ? 'them' : 'it'} to see the rest.)` : '';
      milestone(w, emit, 'outcome', said?.focus ?? ['store'], true);
      emit({ op: 'caption', text: (said?.focus ? `${said.text} ` : '') + ending(w, P) + note });
      emit({ op: 'done' });
    } else if (said) emit({ op: 'caption', text: said.text });
  }

  /**
   * This step's caption, from this step's events. Returns {text, label, focus} when the step
   * is a milestone of the story (focus = the stage nodes that changed), {text} otherwise.
   */
  function caption(w, ev, P) {
    const s = w.stores.store;
    if (ev.sent) {
      const { id, token } = ev.sent;
      return {
        label: `${id} sends ${token}`,
        focus: [id],
        text: ev.sent.expired
          ? `${id} wakes. It still believes it holds ${W.token} ${token} — ${cfg.checksLease ? 'its lease check passed before the pause, so it does not check again' : 'it does not check its lease before writing, trusting its renewal thread to report a lost one'} — and sends its write with ${token}. The lock service expired its session while it slept.` +
            (ev.sent.lost ? ` Its renewal thread wakes too and sends the overdue keep-alive: refused, the service no longer knows the session. Now ${id} knows it lost the lock — but the write has already left.` : '')
          : `${id} wakes and sends its write with ${W.token} ${token}${ev.sent.renewed != null ? `; its renewal thread sends the keep-alive that fell due while it slept, and the service extends the session to t=${ev.sent.renewed}` : ''}. Its session never expired, so it really does still hold the lock.`,
      };
    }
    const late = ev.writes.find((x) => x.late);
    const wr = late ?? ev.writes[0];
    if (wr) {
      const r = wr.row;
      const g = newerGrant(w, r.token, r.t);
      // a write delivered after its sender was killed or paused: it was already on the wire
      const onWire = wr.was ? ` ${wr.id} was ${wr.was === 'dead' ? 'killed' : 'paused'} after sending it, and the write arrived all the same: a write on the wire cannot be called back.` : '';
      if (!r.accepted)
        return {
          label: `${r.token} ${s.http ? '412' : 'refused'}`,
          focus: ['store', wr.id],
          text: `${r.token} < ${r.highest}: ${W.refused}. The ${W.store} has already seen ${W.token} ${r.highest}, so it rejects the lower one as stale. ` +
            (wr.was ? onWire.trim() : wr.knew ? `${wr.id} had learnt it lost the lock after sending — too late: a write on the wire cannot be called back.` : `${wr.id} learns it lost the lock the only way a paused process can: by being told after the fact.`) +
            (cfg.text.refusedExtra ? ` ${cfg.text.refusedExtra(wr)}` : ''),
        };
      if (r.stale && !s.fencing)
        return { label: `${r.token} lands`, focus: ['store'], text: `The ${W.store} checks nothing: ${wr.id}'s write with ${r.token} lands${wr.before && wr.before.by !== wr.id ? ` on top of ${wr.before.by}'s ${wr.before.token}` : ''}, ${g ? `although the lock service gave the lock to ${g.id} (${g.token})` : 'although its session had expired'}.${cfg.text.staleExtra?.(wr) ? ` ${cfg.text.staleExtra(wr)}` : ''}${onWire}` };
      if (r.stale)
        return { label: `${r.token} accepted`, focus: ['store'], text: `Accepted — yet ${wr.id} no longer holds the lock${g ? ` (${g.id} was granted ${g.token})` : ''}. The ${W.store}'s highest ${W.token} was ${highestBefore(s, r) ?? r.token}: ${g ? g.token : 'the newer token'} never reached it, so it had nothing higher to refuse against. A fence only knows the tokens that were written to it.${onWire}` };
      const first = s.rows.filter((x) => x.byId === wr.id).length === 1;
      if (wr.late || (late && r.accepted))
        return { label: `${r.token} ok`, focus: ['store'], text: `Accepted: ${wr.id}'s session never expired, so ${r.token} is still the current ${W.token} and its write is legitimate.${onWire}` };
      if (first)
        return {
          label: `${wr.id} writes ${r.token}`,
          focus: ['store'],
          text: s.fencing
            ? `${wr.id} writes with ${W.token} ${r.token}: every write to the protected resource carries the grant's ${W.token}. The ${W.store} records ${r.token} as the highest it has seen.`
            : `${wr.id} writes with ${W.token} ${r.token}. The ${W.store} keeps whatever arrives last; it never looks at a ${W.token}.`,
        };
      return { text: `${wr.id} writes its next batch with ${r.token}.${w.clients[A].status === 'paused' && wr.id !== A ? ` ${A}, paused, still believes it holds ${w.clients[A].token ?? 'the lock'}.` : ''}` };
    }
    if (ev.pausedNow) {
      const d = deadlineOf(w, 'svc', w.clients[A]);
      const l = ev.prepared?.lease;
      return {
        label: `${A} pauses`,
        focus: [A],
        text: `${l && l.state === 'safe' ? `${A} checks its lease by its own clock (safe until t=${l.until}) and is about to write — then ` : ''}${A} hits a ${P.pause}-second stop-the-world garbage-collection pause. ` +
          `Nothing in ${A} runs: no work, no heartbeats, and its own clock stops. The service has ${A}'s session deadline at t=${d} (its last heartbeat, or the open if it has sent none, + the ${P.ttl}-second session timeout).`,
      };
    }
    if (ev.steppedDown)
      return { label: `${ev.steppedDown.id} stops`, focus: [ev.steppedDown.id], text: `${ev.steppedDown.id} checks its lease by its own clock before writing: ${ev.steppedDown.lease.state}. It stops acting — erring toward unavailability rather than unsafety.` };
    if (ev.expired.length) {
      const who = ev.expired.filter(Boolean);
      const g = ev.granted[0];
      const state = (id) => {
        const c = w.clients[id];
        return c.status === 'dead' ? 'it is dead' : c.status === 'paused' ? (c.pausedBy === 'gc' ? 'it is frozen in its pause' : 'you paused it') : 'its heartbeats stopped';
      };
      const x = who[0];
      const still = x && w.clients[x].status === 'paused' && w.clients[x].token != null ? ` ${x} cannot know: it still believes it holds ${w.clients[x].token}.` : '';
      return {
        label: g ? `${g.id} gets ${g.token}` : `${x} expires`,
        focus: g ? ['svc', g.id] : ['svc'],
        text: `${who.join(' and ')} sent no heartbeat for the ${P.ttl}-second session timeout (${who.map(state).join('; ')}): the service expires the session${who.length > 1 ? 's' : ''}${expiryEnds(ev, who)}.` +
          (g ? ` In the same tick the head of the wait queue is notified: ${g.id} is granted ${W.token} ${g.token}.` : cfg.text.noGrant?.(w, P) ?? ' Nobody is waiting for it.') + still,
      };
    }
    if (ev.granted.length) {
      const g = ev.granted[0];
      if (!ev.released.length && cfg.text.grantAfterDelay) return { label: `${g.id} gets ${g.token}`, focus: ['svc', g.id], text: cfg.text.grantAfterDelay(w, g, P) };
      return { label: `${g.id} gets ${g.token}`, focus: ['svc', g.id], text: `${ev.released[0] ?? 'The holder'} released the lock: exactly one waiter is notified. ${g.id} is granted ${W.token} ${g.token}.` };
    }
    if (ev.released.length) return { text: `${ev.released.join(' and ')} released the lock; nobody is waiting for it.` };
    const a = w.clients[A];
    if (a.status === 'paused' && a.pausedBy === 'gc') {
      const d = deadlineOf(w, 'svc', a);
      if (d != null) return { text: `${A} is frozen (${t0(w, A)} of ${P.pause} seconds). ${otherNow(w, B)}; ${A} sends nothing. The service only sees silence; ${A}'s session deadline is t=${d}.` };
      const own = cfg.text.frozen?.(w, P);
      if (own) return { text: own };
      // who holds the lock now is the core's answer (B may have been killed, and its session
      // expired with A's: then nobody does)
      const hs = w.nodes.svc.core.holders(cfg.lock).map((h) => `${whoseSession(w, 'svc', h.session) ?? `session ${h.session}`} (${W.token} ${h.token})`);
      const now = hs.length ? `${hs.join(' and ')} ${hs.length > 1 ? 'hold' : 'holds'} it now` : 'nobody holds it now';
      return { text: `${A} is still frozen and unaware. Its session is gone, and its hold on the lock with it: ${now}. ${A} will wake at t=${a.mem.resumeAt} believing it holds ${a.token}. This gap is the danger window: a longer timeout only moves it.` };
    }
    return cfg.text.quiet?.(w, P, { deadline: (id) => deadlineOf(w, 'svc', w.clients[id]) }) ?? null;
  }

  /** What an expiry ended, as the core's outputs say: a hold (released), a place in the queue. */
  function expiryEnds(ev, who) {
    const held = who.filter((id) => ev.heldBy.includes(id));
    const queued = who.filter((id) => !held.includes(id) && ev.queued.includes(id));
    const all = (xs) => xs.length === who.length;
    const ends = [];
    if (held.length) ends.push(`releases ${all(held) ? (who.length > 1 ? 'their locks' : 'its lock') : `${held.join(' and ')}'s lock`}`);
    if (queued.length) ends.push(`drops ${all(queued) ? (who.length > 1 ? 'them' : 'it') : queued.join(' and ')} from the wait queue`);
    return ends.length ? ` and ${ends.join(' and ')}` : '';
  }

  /** What the other client does while A is frozen, from its status (killed and paused ones send nothing). */
  function otherNow(w, id) {
    const c = w.clients[id];
    if (heartbeats(c)) return `${id} keeps heartbeating`;
    if (c.status === 'dead') return `${id} is dead`;
    if (c.status === 'paused') return `${id} is paused too`;
    return `${id} no longer heartbeats`;
  }

  function t0(w, id) {
    const sp = w.spans.filter((x) => x.lane === id && x.kind === 'pause').at(-1);
    return sp ? w.t - sp.from : 0;
  }

  function outcome(w) {
    const s = w.stores.store;
    const v = storeVerdict(w);
    return {
      accepted: s.rows.filter((r) => r.accepted).map((r) => r.token),
      refused: s.rows.filter((r) => !r.accepted).map((r) => ({ token: r.token, highest: r.highest })),
      stale: v.stale.map((r) => r.token),
      corrupted: v.corrupted,
      kind: v.kind,
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
      { id: 'store', label: cfg.storeLane ?? cfg.storeLabel }, // a lane label fits ~12 characters
    ],
    clients: [A, B],
    step,
    apply,
    outcome,
    verdict: (w) => storeVerdict(w),
    layout: (w, narrow) =>
      narrow
        ? {
            width: 400,
            height: 572,
            nodes: [
              { id: A, kind: 'client', x: 34, y: 40, side: 'right' },
              { id: B, kind: 'client', x: 150, y: 118, side: 'right' },
              // boxes right of centre and B indented: the arrows from the clients run down
              // the boxes' left side, clear of B and its text
              { id: 'svc', kind: 'service', x: 222, y: 265, lock: cfg.lock },
              { id: 'store', kind: 'store', x: 222, y: 468 },
            ],
          }
        : {
            nodes: [
              { id: A, kind: 'client', x: 130, y: 62 },
              { id: B, kind: 'client', x: 130, y: 212 },
              { id: 'svc', kind: 'service', x: 410, y: 140, lock: cfg.lock },
              { id: 'store', kind: 'store', x: 690, y: 140 },
            ],
          },
  };
}
