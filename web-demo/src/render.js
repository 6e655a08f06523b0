// The renderer: draws a World. It only reads (the world, and the cores' getters) and never
// changes anything, so drawing the same point twice gives the same picture.

import { axisTicks, fmtTime, DEFAULT_TICK_MS } from './units.js';

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

// Stage and swimlane sizes in SVG units; a scene's layout may ask for a narrow (phone) form.
const WIDE = 800;
const NARROW = 400;

// ------------------------------------------------------------------ the stage

/** What a client believes, in a few words (its badge) and in a sentence (for screen readers). */
function clientBadge(w, c) {
  if (c.status === 'dead') return { text: c.mem?.crashed ? 'crashed' : 'killed', cls: 'dead' };
  const paused = c.status === 'paused';
  let text;
  let cls;
  const own = w.scene.badge?.(w, c); // a scene whose clients hold on several cores says how many
  if (own) ({ text, cls } = own);
  else if (c.holding && c.token != null) {
    const truth = stillHolds(w, c);
    text = truth === false ? `believes ${c.token}` : `holds ${c.token}`;
    cls = truth === false ? 'stale' : 'holds';
  } else if (c.waiting) {
    text = `queued #${queuePosition(w, c) ?? c.waiting}`;
    cls = 'waits';
  } else if (c.lost) {
    text = 'lost the lock';
    cls = 'lost';
  } else if (c.mem?.finished) {
    text = 'done';
    cls = 'idle';
  } else if (c.mem?.watching) {
    text = c.mem.wasted ? `busy ×${c.mem.wasted}` : 'watching';
    cls = c.mem.wasted ? 'busy' : 'waits';
  } else {
    text = c.session ? 'no lock' : 'idle';
    cls = 'idle';
  }
  if (paused) text = `${c.pausedBy === 'gc' ? 'GC pause' : 'paused'} · ${text}`;
  return { text, cls: paused ? `${cls} paused` : cls };
}

/** Does the core still list this client's believed grant? (null = no core to ask) */
function stillHolds(w, c) {
  if (w.scene.key === 'replication') return null; // holders differ per replica: shown on each
  const node = Object.values(w.nodes).find((n) => n.group === c.group);
  if (!w.scene.lock || !node || !node.alive) return null;
  const hs = node.core.holders(w.scene.lock);
  return hs.some((h) => h.token === c.token && w.sessions[`${node.group}:${h.session}`] === c.id);
}

/** The client's place in the core's wait queue now (its Queued output said where it joined). */
function queuePosition(w, c) {
  const node = Object.values(w.nodes).find((n) => n.group === c.group && n.alive);
  if (!node || !w.scene.lock || w.scene.key === 'replication') return null;
  const i = node.core.waiters(w.scene.lock).findIndex((q) => w.sessions[`${node.group}:${q.session}`] === c.id);
  return i >= 0 ? i + 1 : null;
}

function nameOf(w, group, session) {
  const id = w.sessions[`${group}:${session}`];
  return id ? w.clients[id].name : `session ${session}`;
}

/** The client's own view of its lease (the core's SessionKeeper), by its own clock. A paused
 * process's clock is stopped: it shows what the client last knew, at the moment it froze. */
function leaseLine(w, c, x, y, side = false) {
  if (c.status === 'dead' || (!c.session && !c.lost)) return '';
  const frozen = c.status === 'paused' ? w.spans.filter((s) => s.lane === c.id && s.kind === 'pause' && s.to === null).at(-1) : null;
  const at = frozen ? frozen.from : w.t;
  const l = w.lease(c.id, at);
  if (!l) return '';
  const state = { safe: `safe until t=${l.until}`, jeopardy: 'jeopardy', expired: 'expired', unconfirmed: 'unconfirmed' }[l.state];
  const text = frozen ? `❚❚ own clock stopped at t=${at}` : `own clock: ${state}`;
  return `<text class="lease ${l.state} ${frozen ? 'stopped' : ''} ${side ? 'side' : ''}" x="${x}" y="${y}" data-lease="${l.state}" data-clock="${frozen ? 'stopped' : 'running'}">${esc(text)}</text>`;
}

function drawClient(w, n, interactive) {
  const c = w.clients[n.id];
  const r = n.small ? 21 : 29;
  const b = clientBadge(w, c);
  const label = `Client ${c.name}: ${b.text}${c.status === 'running' ? '' : ` (${c.status})`}. Press Enter to pause, resume or kill it.`;
  const icon = c.status === 'paused' ? `<g class="icon-pause" transform="translate(${n.x + r * 0.72},${n.y - r * 0.72})"><circle r="9"/><rect x="-4" y="-4.5" width="3" height="9"/><rect x="1" y="-4.5" width="3" height="9"/></g>` : '';
  const dead = c.status === 'dead' ? `<path class="icon-dead" d="M${n.x - r * 0.6},${n.y - r * 0.6}L${n.x + r * 0.6},${n.y + r * 0.6}M${n.x + r * 0.6},${n.y - r * 0.6}L${n.x - r * 0.6},${n.y + r * 0.6}"/>` : '';
  // the badge and the own-clock line go under the circle, or beside it (`side: 'right'`, a
  // phone's narrow column)
  const side = n.side === 'right';
  const bx = side ? n.x + r + 10 : n.x;
  const by = (side ? n.y - 3 : n.small ? n.y + r + 13 : n.y + r + 17) + (n.badgeDy ?? 0);
  return `<g class="node client ${b.cls} st-${c.status}" data-testid="client-${esc(n.id)}" data-client="${esc(n.id)}" data-status="${c.status}" data-badge="${esc(b.text)}"
      ${interactive ? `tabindex="0" role="button" aria-haspopup="menu" aria-label="${esc(label)}"` : ''}>
    <circle class="halo" cx="${n.x}" cy="${n.y}" r="${r + 5}"/>
    <circle class="body" cx="${n.x}" cy="${n.y}" r="${r}"/>
    <text class="name ${n.small ? 'small' : ''}" x="${n.x}" y="${n.y + (n.small ? 5 : 7)}">${esc(n.short ?? c.name)}</text>
    ${icon}${dead}
    <text class="badge ${b.cls} ${side ? 'side' : ''}" x="${bx}" y="${by}">${esc(b.text)}</text>
    ${n.noLease ? '' : leaseLine(w, c, bx, by + 17, side)}
  </g>`;
}

/** A phone's short storage box (250 × 84): its verdict, highest token and latest writes. */
function drawStoreCompact(w, n) {
  const s = w.stores[n.id];
  const x = n.x - 125;
  const y = n.y - 42;
  const hi = w.highest(n.id);
  const v = w.scene.verdict ? w.scene.verdict(w, n.id) : { corrupted: s.corrupted, stale: [] };
  const bannerText = v.corrupted ? 'CORRUPTED' : v.stale.length ? 'STALE LANDED' : '';
  const rows = s.rows.slice(-2).map((r, i) => {
    const cls = r.accepted ? (r.stale ? 'corrupt' : 'ok') : 'refused';
    const mark = r.accepted ? (r.stale ? '!' : '✓') : '✗';
    const what = r.accepted ? (r.stale ? 'landed' : 'ok') : `${r.token}<${r.highest}`;
    return `<text class="row ${cls}" x="${x + 10}" y="${y + 58 + i * 18}"><tspan class="m">${mark}</tspan> ${esc(r.by)} · ${r.token} <tspan class="what">${esc(what)}</tspan></text>`;
  });
  return `<g class="node store compact ${bannerText ? 'is-corrupt' : ''}" data-testid="${esc(n.id)}" data-verdict="${v.corrupted ? 'corrupted' : v.stale.length ? 'stale' : 'clean'}">
    <rect class="box" x="${x}" y="${y}" width="250" height="84" rx="10"/>
    <text class="title" x="${x + 10}" y="${y + 20}">${s.fencing ? `max <tspan data-testid="highest">${hi ?? '—'}</tspan>` : 'checks nothing'}</text>
    ${bannerText ? `<text class="banner-text" data-testid="banner" x="${x + 240}" y="${y + 20}" text-anchor="end">${bannerText}</text>` : ''}
    ${rows.join('')}
  </g>`;
}

/** A phone's short lock-service box (250 × 84): holder, queue and revision. */
function drawServiceCompact(w, n) {
  const core = w.nodes[n.id].core;
  const hs = core.holders(n.lock);
  const ws = core.waiters(n.lock);
  const x = n.x - 125;
  const y = n.y - 42;
  const holder = hs.length ? hs.map((h) => `${nameOf(w, 'svc', h.session)} · token ${h.token}`).join(', ') : 'free';
  return `<g class="node service compact" data-testid="service">
    <rect class="box" x="${x}" y="${y}" width="250" height="84" rx="10"/>
    <text class="title" x="${x + 10}" y="${y + 20}">${esc(w.nodes[n.id].label)}</text>
    <text class="row" x="${x + 10}" y="${y + 40}"><tspan class="k">holder</tspan> <tspan class="v ${hs.length ? 'good' : 'muted'}">${esc(holder)}</tspan></text>
    <text class="row" x="${x + 10}" y="${y + 58}"><tspan class="k">queue</tspan> ${ws.length ? ws.map((q) => esc(nameOf(w, 'svc', q.session))).join(' ') : 'empty'} <tspan class="k">rev</tspan> ${core.revision()}</text>
    <text class="row" x="${x + 10}" y="${y + 76}"><tspan class="k">clock</tspan> t=${core.now()}</text>
  </g>`;
}

/** One Redlock node: its own clock, and the holder its core lists (whose value, until when). */
function drawRlNode(w, n) {
  const node = w.nodes[n.id];
  const core = node.core;
  const bw = n.w ?? 80;
  const x = n.x - bw / 2;
  const y = n.y - 46; // the box is 92 tall
  const skew = w.custom.skew?.[n.id] ?? 0;
  const narrow = bw < 75; // a phone's box: shorter rows
  const hs = core.holders(w.scene.lock);
  const h = hs[0];
  const id = h ? w.sessions[`${n.id}:${h.session}`] : null;
  const c = id ? w.clients[id] : null;
  const exp = h ? core.session(h.session)?.expiresAt : null;
  return `<g class="node rlnode ${skew ? 'skewed' : ''} ${h ? 'held' : ''}" data-testid="rl-${esc(n.id)}" data-holder="${c ? esc(c.name) : ''}" data-clock="${core.now()}">
    <rect class="box" x="${x}" y="${y}" width="${bw}" height="92" rx="9"/>
    <text class="title" x="${x + 8}" y="${y + 19}">${esc(n.id)}</text>
    <text class="row clock ${skew ? 'bad' : ''}" x="${x + 8}" y="${y + 37}">t=${core.now()}${skew ? `${narrow ? '' : ' '}+${skew}` : ''}</text>
    <text class="row ${c ? 'good' : 'muted'}" x="${x + 8}" y="${y + 58}">${c ? `${esc(c.name)}${narrow ? ' ' : ' · '}${c.mem.value ?? ''}` : 'free'}</text>
    <text class="row" x="${x + 8}" y="${y + 78}">${exp != null ? `${narrow ? 'to' : 'until'} ${exp}` : ''}</text>
  </g>`;
}

function drawService(w, n) {
  if (n.compact) return drawServiceCompact(w, n);
  const core = w.nodes[n.id].core;
  const hs = core.holders(n.lock);
  const ws = core.waiters(n.lock);
  const bw = n.w ?? 230; // a phone's layout may widen the box for a long lock name
  const x = n.x - bw / 2;
  const y = n.y - 95;
  const sessions = core.sessions();
  const rows = [];
  rows.push(`<tspan class="k">lock</tspan> <tspan class="mono">${esc(n.lock)}</tspan>`);
  rows.push(`<tspan class="k">holder</tspan> ${hs.length ? hs.map((h) => `<tspan class="v good">${esc(nameOf(w, 'svc', h.session))} · token ${h.token}</tspan>`).join(', ') : '<tspan class="v muted">free</tspan>'}`);
  const delayed = core.lockDelayUntil(n.lock);
  if (delayed != null) rows.push(`<tspan class="k">lock-delay</tspan> <tspan class="v warn" data-testid="lock-delay">until t=${delayed}</tspan>`);
  rows.push(`<tspan class="k">queue</tspan> ${ws.length ? ws.map((q, i) => `<tspan class="v">${i + 1}. ${esc(nameOf(w, 'svc', q.session))}</tspan>`).join('  ') : '<tspan class="v muted">empty</tspan>'}`);
  for (const s of sessions) {
    const info = core.session(s);
    const nm = nameOf(w, 'svc', s);
    rows.push(`<tspan class="k">session</tspan> <tspan class="v">${esc(nm)}: expires t=${info.expiresAt}</tspan>`);
  }
  rows.push(`<tspan class="k">revision</tspan> <tspan class="v">${core.revision()}</tspan>`);
  const lines = rows.slice(0, 7).map((r, i) => `<text class="row" x="${x + 14}" y="${y + 64 + i * 18}">${r}</text>`).join('');
  return `<g class="node service" data-testid="service">
    <rect class="box" x="${x}" y="${y}" width="${bw}" height="190" rx="12"/>
    <text class="title" x="${x + 14}" y="${y + 24}">Lock service</text>
    <text class="subtitle" x="${x + 14}" y="${y + 40}">the real fencelock core, in wasm</text>
    ${lines}
  </g>`;
}

function drawStore(w, n) {
  if (n.compact) return drawStoreCompact(w, n);
  const s = w.stores[n.id];
  const x = n.x - 95;
  const y = n.y - 95;
  const hi = w.highest(n.id);
  const head = s.fencing ? `highest token seen: <tspan class="big" data-testid="highest">${hi ?? '—'}</tspan>` : `<tspan class="muted">checks no token</tspan>`;
  // what the resource holds now, part by part (a stale part is the corruption), then the
  // latest writes
  const parts = Object.entries(s.contents);
  const contents = parts.map(([part, v], i) => `<text class="row part ${v.stale ? 'corrupt' : ''}" x="${x + 12}" y="${y + 70 + i * 18}"><tspan class="k">${esc(part)}</tspan> ${esc(v.by)}·${v.token}${v.stale ? ' stale' : ''}</text>`);
  const top = parts.length ? 70 + parts.length * 18 + 8 : 72;
  const sep = parts.length ? `<line class="sep" x1="${x + 12}" x2="${x + 178}" y1="${y + top - 12}" y2="${y + top - 12}"/>` : '';
  // the banner says what the storage's decisions add up to (the scene's verdict): mixed
  // data, or a stale write that landed without overwriting anyone
  const v = w.scene.verdict ? w.scene.verdict(w, n.id) : { corrupted: s.corrupted, stale: [] };
  const bannerText = v.corrupted ? 'DATA CORRUPTED' : v.stale.length ? (w.scene.key === 'election' ? 'SPLIT BRAIN' : 'STALE WRITE LANDED') : '';
  const room = Math.max(1, Math.floor((bannerText ? 160 : 180) - top) / 20 + 1);
  const rows = s.rows.slice(-Math.floor(room)).map((r, i) => {
    const cls = r.accepted ? (r.stale ? 'corrupt' : 'ok') : 'refused';
    const mark = r.accepted ? (r.stale ? '!' : '✓') : '✗';
    const what = r.accepted ? (s.http ? '200' : r.stale ? 'landed' : 'ok') : s.http ? '412' : `stale ${r.token}<${r.highest}`;
    return `<text class="row ${cls}" x="${x + 12}" y="${y + top + 8 + i * 18}"><tspan class="m">${mark}</tspan> ${esc(r.by)} · ${r.token} <tspan class="what">${esc(what)}</tspan></text>`;
  });
  const banner = bannerText ? `<g class="corrupt-banner" data-testid="banner"><rect x="${x}" y="${y + 170}" width="190" height="26" rx="6"/><text x="${x + 95}" y="${y + 188}">${bannerText}</text></g>` : '';
  return `<g class="node store ${bannerText ? 'is-corrupt' : ''}" data-testid="${n.id === 'store2' ? 'store2' : 'store'}" data-verdict="${v.corrupted ? 'corrupted' : v.stale.length ? 'stale' : 'clean'}">
    <rect class="box" x="${x}" y="${y}" width="190" height="${bannerText ? 200 : 190}" rx="12"/>
    <text class="title" x="${x + 12}" y="${y + 24}">${esc(s.label)}</text>
    <text class="row" x="${x + 12}" y="${y + 46}">${head}</text>
    ${contents.join('')}${sep}
    ${rows.join('')}
    ${banner}
  </g>`;
}

function drawHub(w, n) {
  const core = w.nodes[n.id].core;
  const lock = w.scene.lock;
  const hs = core.holders(lock);
  const ws = core.waiters(lock);
  const holder = hs[0] ? `${nameOf(w, n.id, hs[0].session)} · ${hs[0].token}` : 'free';
  const ids = w.scene.laneIds[n.id];
  const wake = ids.reduce((a, id) => a + w.clients[id].mem.wakeups, 0);
  const wasted = ids.reduce((a, id) => a + w.clients[id].mem.wasted, 0);
  return `<g class="node hub" data-testid="hub-${esc(n.id)}">
    <text class="panel-title" x="${n.x}" y="${n.y - (n.titleDy ?? 150)}">${esc(n.title)}</text>
    <circle class="box" cx="${n.x}" cy="${n.y}" r="50"/>
    <text class="lockname" x="${n.x}" y="${n.y - 12}">${esc(lock)}</text>
    <text class="holder" x="${n.x}" y="${n.y + 8}">${esc(holder)}</text>
    <text class="queue" x="${n.x}" y="${n.y + 26}">${n.id === 'queue' ? `queue: ${ws.length}` : `watchers: ${ids.filter((id) => w.clients[id].mem.watching).length}`}</text>
    <g class="counters" data-testid="counters-${esc(n.id)}" data-wakeups="${wake}" data-wasted="${wasted}">
      <text x="${n.x - 60}" y="${n.y + (n.countDy ?? 158)}" class="count">wake-ups <tspan class="num">${wake}</tspan></text>
      <text x="${n.x + 60}" y="${n.y + (n.countDy ?? 158)}" class="count ${wasted ? 'bad' : ''}">wasted <tspan class="num">${wasted}</tspan></text>
    </g>
  </g>`;
}

function drawReplica(w, n) {
  const node = w.nodes[n.id];
  const L = w.custom[n.lane];
  const x = n.x - 55;
  const y = n.y - 55;
  const lock = w.scene.lock;
  const hs = node.alive ? node.core.holders(lock) : [];
  const holder = hs.length ? hs.map((h) => `${nameOf(w, node.group, h.session)}·${h.token}`).join(' ') : 'free';
  const applied = L.applied[n.id];
  const head = L.head === n.id;
  const role = !node.alive ? 'DOWN' : head ? (n.lane === 'redis' ? '★ primary' : '★ leader') : n.lane === 'redis' ? 'replica' : 'follower';
  // This node's own log: what it has applied (filled), of it what the group acknowledged to
  // the client (filled green with a tick), and — while it is alive — the entries the head has
  // that have not reached it yet (empty, dashed). A dead node keeps what it had when it died.
  const shown = node.alive ? L.log.length : applied;
  const cells = L.log.slice(0, shown).map((e, i) => {
    const cx = x + 10 + i * 15;
    const cy = y + 60;
    const has = i < applied;
    const acked = has && i < L.acked && n.lane === 'raft';
    const what = `entry #${i + 1}: ${e.input.type} — ${has ? (acked ? 'applied here and acknowledged' : 'applied here') : 'not here yet'}`;
    return `<g class="cell-g" data-cell="${has ? (acked ? 'acked' : 'applied') : 'missing'}"><rect class="cell ${has ? 'applied' : 'missing'} ${acked ? 'acked' : ''}" x="${cx}" y="${cy}" width="12" height="12" rx="2"><title>${esc(what)}</title></rect>${acked ? `<path class="tick" d="M${cx + 2.5},${cy + 6.5}l2.5,2.5l4.5,-5.5"/>` : ''}</g>`;
  }).join('');
  return `<g class="node replica ${node.alive ? '' : 'down'} ${head ? 'head' : ''}" data-testid="replica-${esc(n.id)}" data-alive="${node.alive}">
    <rect class="box" x="${x}" y="${y}" width="110" height="110" rx="10"/>
    <text class="title" x="${x + 10}" y="${y + 20}">${esc(n.title || n.id)}</text>
    <text class="row role" x="${x + 10}" y="${y + 37}">${role}</text>
    <text class="row" x="${x + 10}" y="${y + 54}">${node.alive ? `applied ${applied}/${L.log.length}` : `had ${applied} entries`}</text>
    ${cells}
    <text class="row holder" x="${x + 10}" y="${y + 96}">${node.alive ? `holder: ${esc(holder)}` : ''}</text>
  </g>`;
}

// ------------------------------------------------------------------ semaphores

/** The first words of a holder label ("worker-2 (pid 4711)" → "worker-2"), for a short line. */
const shortLabel = (label) => String(label).split(' (')[0];

/** One permit slot of a semaphore box: a filled or empty square and its line. */
function slotRow(x, y, cls, text, testid) {
  return `<g class="slot ${cls}" data-testid="${testid}" data-slot="${cls}"><rect class="sq" x="${x}" y="${y - 11}" width="12" height="12" rx="2"/><text class="row slot-text" x="${x + 18}" y="${y}">${text}</text></g>`;
}

/**
 * The simulated counter semaphore (a Redis key holding the number of free permits): what the
 * key says, and — drawn by the page, which sees every process — which of its taken permits
 * belong to a live process and which to one that crashed. The key itself knows none of it.
 */
function drawCounter(w, n) {
  const k = w.custom.counter;
  const bw = n.w ?? 360;
  const bh = n.h ?? 164;
  const x = n.x - bw / 2;
  const y = n.y - bh / 2;
  const ids = w.scene.sides.counter;
  const live = ids.filter((id) => w.clients[id].holding && w.clients[id].status !== 'dead');
  const leaked = ids.filter((id) => w.clients[id].holding && w.clients[id].status === 'dead');
  const taken = k.limit - k.free;
  const lh = n.compact ? 18 : 19;
  const top = n.compact ? 40 : 62;
  const slots = [];
  for (let i = 0; i < k.limit; i += 1) {
    const yy = y + top + (i + 1) * lh;
    if (i < live.length && i < taken) slots.push(slotRow(x + 12, yy, 'taken', `taken <tspan class="muted">· ${esc(w.clients[live[i]].mem.short)} (only this page knows)</tspan>`, `ctr-slot-${i + 1}`));
    else if (i < taken) {
      const id = leaked[i - live.length];
      slots.push(slotRow(x + 12, yy, 'leaked', `taken${id ? ` · ${esc(w.clients[id].mem.short)} died: leaked for good` : ''}`, `ctr-slot-${i + 1}`));
    } else slots.push(slotRow(x + 12, yy, 'free', 'free', `ctr-slot-${i + 1}`));
  }
  return `<g class="node sema counter ${n.compact ? 'compact' : ''} ${k.free === 0 ? 'full' : ''}" data-testid="counter" data-free="${k.free}" data-limit="${k.limit}" data-leaked="${leaked.length}">
    <rect class="box" x="${x}" y="${y}" width="${bw}" height="${bh}" rx="10"/>
    <text class="title" x="${x + 12}" y="${y + 21}">Redis key <tspan class="mono">${esc(w.scene.lock)}</tspan></text>
    ${n.compact ? '' : `<text class="subtitle" x="${x + 12}" y="${y + 38}">a counter of free permits: no owner, no expiry</text>`}
    <text class="row" x="${x + 12}" y="${y + top}"><tspan class="k">free permits</tspan> <tspan class="big ${k.free === 0 ? 'bad' : ''}" data-testid="ctr-free">${k.free}</tspan> <tspan class="k">of ${k.limit}</tspan></text>
    ${slots.join('')}
  </g>`;
}

/** The fencelock semaphore: the core's permits in use, its holders (labels, tokens) and queue. */
function drawSemaphore(w, n) {
  const node = w.nodes[n.id];
  const core = node.core;
  const lock = w.scene.lock;
  const bw = n.w ?? 360;
  const bh = n.h ?? 164;
  const x = n.x - bw / 2;
  const y = n.y - bh / 2;
  const limit = w.scene.limit;
  const p = core.permits(lock);
  const inUse = p ? p.inUse : 0;
  const hs = core.holders(lock);
  const ws = core.waiters(lock);
  const lh = n.compact ? 18 : 19;
  const top = n.compact ? 40 : 62;
  const slots = [];
  let i = 0;
  const gone = []; // holders whose process died: their sessions keep the permits until expiry
  for (const h of hs) {
    const count = typeof h.mode === 'object' ? h.mode.permits : 1;
    const id = w.sessions[`${node.group}:${h.session}`];
    const dead = id && w.clients[id].status === 'dead';
    if (dead) gone.push({ who: w.clients[id].mem.short ?? `session ${h.session}`, until: core.session(h.session)?.expiresAt });
    for (let k = 0; k < count && i < limit; k += 1, i += 1) {
      const who = esc(h.label || `session ${h.session}`);
      slots.push(slotRow(x + 12, y + top + (i + 1) * lh, dead ? 'orphan' : 'held', `${who} · token ${h.token}${dead && n.compact ? ' · gone' : ''}`, `fl-slot-${i + 1}`));
    }
  }
  for (; i < limit; i += 1) slots.push(slotRow(x + 12, y + top + (i + 1) * lh, 'free', 'free', `fl-slot-${i + 1}`));
  const queue = ws.length ? ws.map((q, k) => `${k + 1}. ${esc(shortLabel(q.label || `session ${q.session}`))}`).join('  ') : '<tspan class="muted">empty</tspan>';
  return `<g class="node sema ${n.compact ? 'compact' : ''} ${inUse >= limit ? 'full' : ''}" data-testid="semaphore" data-in-use="${inUse}" data-limit="${p ? p.limit : limit}" data-queue="${ws.length}">
    <rect class="box" x="${x}" y="${y}" width="${bw}" height="${bh}" rx="10"/>
    <text class="title" x="${x + 12}" y="${y + 21}">fencelock semaphore <tspan class="mono">${esc(lock)}</tspan></text>
    ${n.compact ? '' : `<text class="subtitle" x="${x + 12}" y="${y + 38}">the real core, in wasm: sessions, holders, a FIFO queue</text>`}
    <text class="row" x="${x + 12}" y="${y + top}"><tspan class="k">permits in use</tspan> <tspan class="big" data-testid="fl-in-use">${inUse}</tspan> <tspan class="k">of ${p ? p.limit : limit} · revision</tspan> ${core.revision()}</text>
    ${slots.join('')}
    <text class="row" x="${x + 12}" y="${y + top + (limit + 1) * lh}" data-testid="fl-queue"><tspan class="k">queue</tspan> ${queue}</text>
    ${n.compact ? '' : gone.map((g, k) => `<text class="row orphan-note" x="${x + 12}" y="${y + top + (limit + 2 + k) * lh}">gone: ${esc(g.who)}'s session keeps its permit until t=${g.until}</text>`).join('')}
  </g>`;
}

/** A watcher's news: the holder changes its session was told (HolderChanged events), latest last. */
function drawFeed(w, n) {
  const c = w.clients[n.watcher];
  const bw = n.w ?? 360;
  const bh = n.h ?? 120;
  const x = n.x - bw / 2;
  const y = n.y - bh / 2;
  const feed = c?.feed ?? [];
  const rows = Math.max(1, Math.floor((bh - 34) / 18));
  const shown = feed.slice(-rows);
  const lines = shown.map((e, i) => {
    const cls = { granted: 'good', expired: 'bad', closed: 'muted', released: 'muted', holding: '' }[e.change] ?? '';
    const who = n.compact ? shortLabel(e.label || `session ${e.holder}`) : e.label || `session ${e.holder}`;
    return `<text class="row feed-row ${cls}" x="${x + 12}" y="${y + 40 + i * 18}" data-change="${esc(e.change)}">t=${e.t} <tspan class="chg">${esc(e.change)}</tspan> ${esc(who)} · ${e.token}</text>`;
  });
  const info = c?.session != null ? w.nodes[n.node]?.core.session(c.session) : null;
  const title = `${info?.label || (c ? c.name : 'watcher')} watches ${w.scene.lock}`;
  return `<g class="node feed ${n.compact ? 'compact' : ''}" data-testid="watch-feed" data-count="${feed.length}">
    <rect class="box" x="${x}" y="${y}" width="${bw}" height="${bh}" rx="10"/>
    <text class="title" x="${x + 12}" y="${y + 20}">${esc(title)}</text>
    ${lines.length ? lines.join('') : `<text class="row muted" x="${x + 12}" y="${y + 40}">no news yet</text>`}
  </g>`;
}

/** A box of fixed sentences (the counter side's answer to "who could I watch?"). */
function drawNote(w, n) {
  const bw = n.w ?? 360;
  const bh = n.h ?? 120;
  const x = n.x - bw / 2;
  const y = n.y - bh / 2;
  return `<g class="node note" data-testid="${esc(n.id)}">
    <rect class="box" x="${x}" y="${y}" width="${bw}" height="${bh}" rx="10"/>
    <text class="title" x="${x + 12}" y="${y + 20}">${esc(n.title)}</text>
    ${n.lines.map((l, i) => `<text class="row" x="${x + 12}" y="${y + 40 + i * 18}">${esc(l)}</text>`).join('')}
  </g>`;
}

function edge(n, tx, ty) {
  // the point where the line toward (tx, ty) leaves node n
  const dx = tx - n.x;
  const dy = ty - n.y;
  const len = Math.hypot(dx, dy) || 1;
  if (n.kind === 'client' || n.kind === 'hub') {
    const r = n.kind === 'hub' ? 52 : n.small ? 24 : 33;
    return [n.x + (dx / len) * r, n.y + (dy / len) * r];
  }
  const [hw, hh] = n.compact || ['rlnode', 'counter', 'sema', 'feed', 'note'].includes(n.kind) ? halfSize(n) : n.kind === 'service' ? [(n.w ?? 230) / 2 + 2, 97] : n.kind === 'store' ? [97, 97] : [57, 57];
  const s = Math.min(hw / Math.abs(dx || 1e-9), hh / Math.abs(dy || 1e-9));
  return [n.x + dx * s, n.y + dy * s];
}

const HALF = { service: [117, 97], store: [97, 100], replica: [57, 57], hub: [52, 52] };

function halfSize(n) {
  if (n.kind === 'client') return n.small ? [24, 24] : [33, 33];
  if (['counter', 'sema', 'feed', 'note'].includes(n.kind)) return [(n.w ?? 360) / 2 + 2, (n.h ?? 164) / 2 + 2];
  if (n.compact) return [127, 44];
  if (n.kind === 'rlnode') return [(n.w ?? 80) / 2 + 2, 48];
  if (n.kind === 'service' && n.w) return [n.w / 2 + 2, 97];
  return HALF[n.kind] || [40, 40];
}

/** A node (other than the ends) whose box the straight line a→b would cross, if any. */
function obstacle(a, b, nodes) {
  let hit = null;
  for (const n of nodes) {
    if (n === a || n === b || n.kind === 'client') continue;
    const [hw, hh] = halfSize(n);
    for (let i = 1; i < 20; i += 1) {
      const x = a.x + ((b.x - a.x) * i) / 20;
      const y = a.y + ((b.y - a.y) * i) / 20;
      if (Math.abs(x - n.x) < hw + 8 && Math.abs(y - n.y) < hh + 8) hit = n;
    }
  }
  return hit;
}

function drawFlashes(w, byId, nodes, W, H, onlyGrantLabels) {
  const seen = new Map();
  const detours = new Map(); // messages already routed round each side of a box: the next goes wider
  return w.flashes
    .map((f) => {
      const a = byId[f.from];
      const b = byId[f.to];
      if (!a || !b || a === b) return '';
      const key = `${f.from}>${f.to}`;
      const k = seen.get(key) || 0;
      seen.set(key, k + 1);
      // a message that would pass through another box bends around it
      const dx = b.x - a.x;
      const dy = b.y - a.y;
      const len = Math.hypot(dx, dy) || 1;
      const [px, py] = [-dy / len, dx / len];
      // a request and its answer travel the same pair of nodes: keep them on parallel tracks
      // (the perpendicular flips with the direction, so "keep right" separates them)
      const lane = 3.5;
      const o = obstacle(a, b, nodes);
      const off = k * 7; // a second message between the same pair runs on a track beside the first
      let d;
      if (o) {
        // route round the box in the way: along its nearer side, clear of it by a margin
        const [hw0, hh0] = halfSize(o);
        const dkey = `${o.id}:${Math.abs(dx) >= Math.abs(dy) ? 'h' : 'v'}:${(a.y + b.y) / 2 < o.y ? 'lo' : 'hi'}`;
        const wider = (detours.get(dkey) || 0) * 16;
        detours.set(dkey, (detours.get(dkey) || 0) + 1);
        const [hw, hh] = [hw0 + wider, hh0 + wider];
        const mx0 = (a.x + b.x) / 2;
        const my0 = (a.y + b.y) / 2;
        let p1;
        let p2;
        if (Math.abs(dx) >= Math.abs(dy)) {
          const sx = Math.sign(dx);
          const yr = Math.min(H - 8, Math.max(8, my0 < o.y - 1 ? o.y - hh - 14 : o.y + hh + 14)) + lane;
          p1 = [o.x - sx * (hw + 14), yr];
          p2 = [o.x + sx * (hw + 14), yr];
        } else {
          const sy = Math.sign(dy);
          const xr = Math.min(W - 8, Math.max(8, mx0 < o.x - 1 ? o.x - hw - 14 : o.x + hw + 14)) + lane;
          p1 = [xr, o.y - sy * (hh + 14)];
          p2 = [xr, o.y + sy * (hh + 14)];
        }
        const [x1, y1] = edgeToward(a, p1[0], p1[1]);
        const [x2, y2] = edgeToward(b, p2[0], p2[1]);
        d = `M${x1},${y1}L${p1[0]},${p1[1]}L${p2[0]},${p2[1]}L${x2},${y2}`;
      } else {
        const [x1, y1] = edgeToward(a, b.x, b.y);
        const [x2, y2] = edgeToward(b, a.x, a.y);
        d = `M${x1 + px * (lane + off)},${y1 + py * (lane + off)}L${x2 + px * (lane + off)},${y2 + py * (lane + off)}`;
      }
      const labelled = f.label && f.kind !== 'hb' && (!onlyGrantLabels || f.kind === 'good');
      return `<g class="flash ${f.kind}" data-kind="${f.kind}" ${labelled ? `data-label="${esc(f.label)}"` : ''}>
        <path d="${d}" marker-end="url(#arrow-${f.kind})"/>
      </g>`;
    })
    .join('');
}

function edgeToward(n, tx, ty) {
  if (Math.abs(tx - n.x) < 1 && Math.abs(ty - n.y) < 1) return [n.x, n.y];
  return edge(n, tx, ty);
}

const KINDS = ['msg', 'good', 'bad', 'warn', 'refused', 'hb', 'repl'];

export function renderStage(el, w, narrow = false) {
  const lay = w.scene.layout(w, narrow);
  const W = lay.width ?? WIDE;
  const H = lay.height ?? 300;
  const byId = Object.fromEntries(lay.nodes.map((n) => [n.id, n]));
  const panels = (lay.panels || []).map((p) => `<g class="panel-bg"><rect x="${p.x}" y="${p.y}" width="${p.w}" height="${p.h}" rx="12"/><text x="${p.x + 14}" y="${p.y + 22}">${esc(p.title)}</text></g>`).join('');
  const nodes = lay.nodes
    .map((n) => `<g class="nodewrap" data-node="${esc(n.id)}">${drawNode(w, n)}</g>`)
    .join('');
  const markers = KINDS.map((k) => `<marker id="arrow-${k}" class="arrow ${k}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z"/></marker>`).join('');
  el.innerHTML = `<svg viewBox="0 0 ${W} ${H}" class="${narrow ? 'narrow' : ''}" role="group" aria-label="${esc(w.scene.title)} at t=${w.scene.tickMs ? fmtTime(Math.max(w.t, 0), w.scene.tickMs) : Math.max(w.t, 0)}" preserveAspectRatio="xMidYMid meet">
    <defs>${markers}
      <pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" class="hatch"/></pattern>
    </defs>
    ${panels}
    <g class="spots"></g>
    <g class="flashes">${drawFlashes(w, byId, lay.nodes, W, H, lay.onlyGrantLabels)}</g>
    ${nodes}
    <g class="flash-labels"></g>
  </svg>`;
  const svg = el.querySelector('svg');
  // the story's "what changed": a spot behind each node the milestone names
  const spots = svg.querySelector('.spots');
  for (const id of w.milestone?.focus ?? []) {
    const g = svg.querySelector(`.nodewrap[data-node="${CSS.escape(id)}"]`);
    if (!g) continue;
    g.classList.add('focus');
    const b = g.getBBox();
    // kept inside the drawing, so no side of it is cut off
    const x1 = Math.max(2, b.x - 6);
    const y1 = Math.max(2, b.y - 6);
    const x2 = Math.min(W - 2, b.x + b.width + 6);
    const y2 = Math.min(H - 2, b.y + b.height + 6);
    spots.insertAdjacentHTML('beforeend', `<rect class="spot" data-spot="${esc(id)}" x="${x1}" y="${y1}" width="${x2 - x1}" height="${y2 - y1}" rx="14"/>`);
  }
  placeFlashLabels(svg, W, H);
}

/**
 * Puts each message's label on its path where it meets no other text, no node and no label
 * placed before it (the swimlane's rule, on the stage): along the path from the sender's
 * end, on the line or just above or below it. A label with no free place is left out — the
 * arrow stays and the event log has the message.
 */
function placeFlashLabels(svg, W, H) {
  const meet = (a, b) => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
  const boxOf = (b, pad = 0) => ({ x1: b.x - pad, y1: b.y - pad, x2: b.x + b.width + pad, y2: b.y + b.height + pad });
  const taken = [];
  for (const t of svg.querySelectorAll('.nodewrap text')) if (t.textContent.trim()) taken.push(boxOf(t.getBBox(), 1));
  for (const r of svg.querySelectorAll('.nodewrap rect.box, .nodewrap circle.body, .nodewrap circle.box')) taken.push(boxOf(r.getBBox(), 1));
  for (const t of svg.querySelectorAll('.panel-bg text')) taken.push(boxOf(t.getBBox(), 1));
  const layer = svg.querySelector('.flash-labels');
  for (const g of svg.querySelectorAll('.flashes g.flash[data-label]')) {
    const path = g.querySelector('path');
    const label = g.dataset.label;
    layer.insertAdjacentHTML('beforeend', `<text class="flash-label ${g.dataset.kind}" x="-999" y="-999">${esc(label)}</text>`);
    const t = layer.lastElementChild;
    const wd = t.getComputedTextLength();
    const bb = t.getBBox();
    const hgt = bb.height || 12;
    const len = path.getTotalLength();
    let placed = null;
    for (const f of [0.36, 0.5, 0.26, 0.62, 0.18, 0.72, 0.82, 0.1]) {
      const p = path.getPointAtLength(len * f);
      for (const [ddx, dy] of [[0, 0], [0, -11], [0, 11], [0, -20], [0, 20], [-28, 0], [28, 0], [-28, -14], [28, -14], [-28, 14], [28, 14], [0, -30], [0, 30]]) {
        const cx = Math.min(W - wd / 2 - 2, Math.max(wd / 2 + 2, p.x + ddx));
        const cy = p.y + dy;
        const box = { x1: cx - wd / 2 - 2, x2: cx + wd / 2 + 2, y1: cy - hgt / 2, y2: cy + hgt / 2 };
        if (box.y1 < 0 || box.y2 > H) continue;
        if (taken.some((o) => meet(box, o))) continue;
        placed = { cx, cy, box };
        break;
      }
      if (placed) break;
    }
    if (!placed) {
      t.remove();
      continue;
    }
    t.setAttribute('x', placed.cx);
    // centre the text's box on the point (the baseline sits below the middle)
    t.setAttribute('y', placed.cy - hgt / 2 - (bb.y + 999));
    taken.push(placed.box);
  }
}

function drawNode(w, n) {
      switch (n.kind) {
        case 'client':
          // a recording is what happened: its sessions are not yours to pause or kill
          return drawClient(w, n, w.scene.key !== 'replay');
        case 'service':
          return drawService(w, n);
        case 'store':
          return drawStore(w, n);
        case 'hub':
          return drawHub(w, n);
        case 'replica':
          return drawReplica(w, n);
        case 'rlnode':
          return drawRlNode(w, n);
        case 'counter':
          return drawCounter(w, n);
        case 'sema':
          return drawSemaphore(w, n);
        case 'feed':
          return drawFeed(w, n);
        case 'note':
          return drawNote(w, n);
        default:
          return '';
      }
}

// ------------------------------------------------------------------ the swimlane

export function renderSwimlane(el, w, totalT, narrow = false) {
  const W = narrow ? NARROW : WIDE;
  const lanes = w.scene.lanes;
  if (!lanes) {
    el.hidden = true;
    el.innerHTML = '';
    return;
  }
  el.hidden = false;
  const LW = narrow ? 100 : 104; // room for the longest lane label ("Lock service") at its phone size
  const LH = 38;
  const top = 38; // room above the lanes for the time ticks and the story's milestones
  const height = top + lanes.length * LH + 8;
  // a long recording shows a window of time that ends at the cursor (a scene asks for it
  // with laneWindow); everything else shows the whole run
  const win = w.scene.laneWindow && totalT > w.scene.laneWindow ? w.scene.laneWindow : null;
  const tickMs = w.scene.tickMs ?? DEFAULT_TICK_MS;
  const t0 = win ? Math.max(0, Math.min(w.t, totalT) - win) : 0;
  const T = win ? t0 + win : Math.max(totalT, 1);
  const X = (t) => LW + 8 + ((W - LW - 56) * (Math.max(t, t0) - t0)) / (T - t0);
  const inWindow = (from, to = from) => !win || (to >= t0 && from <= T);
  const laneY = Object.fromEntries(lanes.map((l, i) => [l.id, top + i * LH]));
  const axis = [];
  // labelled in the scene's tick (a second, or a recording's `tick_ms`)
  for (const { t, label } of axisTicks(t0, T, tickMs, narrow ? 6 : 12)) axis.push(`<line class="grid" x1="${X(t)}" x2="${X(t)}" y1="${top - 4}" y2="${height - 6}"/><text class="tick" x="${X(t)}" y="${top - 26}" data-t="${t}">${label}</text>`);
  // the story's milestones so far, numbered on the time axis (side by side when they share a time)
  let lastX = -1e9;
  for (const m of w.milestones.filter((x) => inWindow(x.t))) {
    const x = Math.max(X(m.t), lastX + 19);
    lastX = x;
    const now = w.milestone && m.t === w.t && m.n === w.milestone.n && m.yours === w.milestone.yours;
    const mark = m.yours ? '✋' : m.n == null ? '■' : String(m.n);
    axis.push(`<g class="ms-mark ${m.yours ? 'yours' : m.n == null ? 'end' : ''} ${now ? 'now' : ''}" data-testid="ms-${m.yours ? 'yours' : m.n ?? 'end'}" data-t="${m.t}"><title>${esc(m.n == null ? m.label : `${m.n}. ${m.label}`)} (t=${m.t})</title><circle cx="${x}" cy="${top - 11}" r="8.5"/><text x="${x}" y="${top - 7}">${mark}</text></g>`);
  }
  const rows = lanes.map((l) => `<text class="lane-label" x="${LW}" y="${laneY[l.id] + LH / 2 + 4}">${esc(narrow && l.short ? l.short : l.label)}</text><line class="lane-line" x1="${LW + 8}" x2="${W - 16}" y1="${laneY[l.id] + LH / 2}" y2="${laneY[l.id] + LH / 2}"/>`);
  // Shapes first, every text after them: a marker never paints over a label. Each label is
  // then placed, at its measured width, clear of every marker and of the labels placed
  // before it; one with no such place is shortened or left out (its marker's tooltip and
  // the stage still say it), and a halo keeps it legible over lines.
  const shapes = [];
  const labels = []; // what to place, in order: span labels first, then refusals, then the rest
  const markers = []; // marker boxes {x1, x2, y1, y2}
  for (const m of w.marks.filter((m) => laneY[m.lane] !== undefined && inWindow(m.t))) {
    const x = X(m.t);
    const client = !!w.clients[m.lane];
    const y = laneY[m.lane] + (client ? 12 : LH / 2);
    const shape = m.kind === 'refused' || m.kind === 'expire' || m.kind === 'crash' ? `<path d="M${x - 5},${y - 5}L${x + 5},${y + 5}M${x + 5},${y - 5}L${x - 5},${y + 5}"/>` : m.kind === 'grant' ? `<path d="M${x},${y - 6}L${x + 6},${y}L${x},${y + 6}L${x - 6},${y}z"/>` : `<circle cx="${x}" cy="${y}" r="5"/>`;
    shapes.push(`<g class="mark ${m.kind}"><title>${esc(m.label)}</title>${shape}</g>`);
    markers.push({ x1: x - 7, x2: x + 7, y1: y - 6, y2: y + 6 });
    const store = m.lane === 'store' || m.lane === 'db';
    const text = store ? m.label : m.short;
    if (text) labels.push({ mark: true, m, x, y, store, text, rank: ['refused', 'corrupt', 'expire', 'crash'].includes(m.kind) ? 1 : 2 });
  }
  const spans = [];
  for (const s of w.spans.filter((s) => laneY[s.lane] !== undefined && inWindow(s.from, s.to ?? w.t))) {
    const to = s.to ?? w.t;
    const x1 = X(s.from);
    const x2 = Math.max(X(to), x1 + 3);
    // two rows per lane: what the client holds or believes (top), whether it runs (bottom)
    const pause = s.kind === 'pause';
    const y = laneY[s.lane] + (pause ? 23 : 4);
    const h = pause ? 12 : 17;
    spans.push(`<g class="span ${s.kind}" data-lane="${esc(s.lane)}" data-label="${esc(s.label)}" data-from="${s.from}" ${s.to === null ? 'data-open' : `data-to="${s.to}"`}><rect x="${x1}" y="${y}" width="${x2 - x1}" height="${h}" rx="4"/></g>`);
    if (x2 - x1 > 46) labels.push({ span: true, s, x1, x2, y, h, pause, text: s.label, rank: 0 });
  }
  labels.sort((a, b) => a.rank - b.rank);
  const texts = labels.map((l) =>
    l.span
      ? `<text class="span-label ${l.s.kind} ${l.pause ? 'small' : ''}" data-lane="${esc(l.s.lane)}" x="-999" y="${l.y + l.h - (l.pause ? 3 : 5)}">${esc(l.text)}</text>`
      : `<g class="mark ${l.m.kind}"><text${l.store ? '' : ' class="svc"'} x="-999" y="0">${esc(l.text)}</text></g>`,
  );
  el.innerHTML = `<svg viewBox="0 0 ${W} ${height}" class="${narrow ? 'narrow' : ''}" role="img" aria-label="Timeline up to t=${w.scene.tickMs ? fmtTime(Math.max(w.t, 0), tickMs) : w.t}">
    <defs><pattern id="hatch-lane" width="7" height="7" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3.5" height="7" class="hatch"/></pattern></defs>
    ${axis.join('')}${rows.join('')}${spans.join('')}${shapes.join('')}
    <line class="cursor" x1="${X(w.t)}" x2="${X(w.t)}" y1="${top - 4}" y2="${height - 4}"/>
    <g class="labels">${texts.join('')}</g>
  </svg>
  <p class="legend" aria-hidden="true">${w.scene.legend ?? `<span class="k hold"></span>holds (the service agrees) <span class="k ghost"></span>believes it holds — the lock is gone
  <span class="k wait"></span>queued <span class="k pause"></span>paused <span class="k ok">●</span>write accepted <span class="k bad">✕</span>refused / expired <span class="k grant">◆</span>grant`}</p>`;
  placeLabels([...el.querySelectorAll('.labels text')], labels, markers, LW);
}

/** Positions the swimlane's label texts (see renderSwimlane); `texts[i]` shows `labels[i]`. */
function placeLabels(texts, labels, markers, LW) {
  // the lane names are off limits too
  const boxes = [{ x1: 0, x2: LW + 2, y1: 0, y2: 1e6 }, ...markers];
  const hit = (b) => boxes.some((o) => b.x1 < o.x2 && o.x1 < b.x2 && b.y1 < o.y2 && o.y1 < b.y2);
  // measure every text before moving any: a measurement after a move would make the browser
  // lay the drawing out again, once per label (seconds for a long recording)
  const widths = texts.map((t) => t.getComputedTextLength());
  const bboxes = texts.map((t, i) => (labels[i].span ? null : t.getBBox()));
  const lastWords = texts.map((t, i) => {
    const l = labels[i];
    if (!l.span) return 0;
    const word = l.text.split(' ').pop();
    return word.length ? t.getSubStringLength(l.text.length - word.length, word.length) : 0;
  });
  labels.forEach((l, i) => {
    const t = texts[i];
    const width = widths[i];
    let box = null;
    if (l.span) {
      // at the span's start, else just past a marker on it (a write dot right after the
      // grant), inside the span if it fits there; else the label's last word ("holds 8" →
      // "8", write dots a tick apart on a phone) in the first gap inside the span
      const { x1, x2, y, h } = l;
      const starts = [x1 + 4, ...boxes.filter((o) => o.x2 > x1 && o.x2 < x2 && y < o.y2 && o.y1 < y + h).map((o) => o.x2 + 1).sort((a, b) => a - b)];
      const fits = (wd) => starts.map((lx) => ({ x1: lx, x2: lx + wd, y1: y, y2: y + h })).filter((b) => !hit(b));
      const whole = fits(width);
      box = whole.find((b) => b.x2 <= x2 - 2) ?? whole[0];
      if (!box) {
        const word = l.text.split(' ').pop();
        const wd = lastWords[i];
        box = word.length < l.text.length ? fits(wd).find((b) => b.x2 <= x2 - 2) : null;
        if (box) t.textContent = word;
      }
      if (box) t.setAttribute('x', box.x1);
    } else {
      // right of the marker as before (above for an accepted write or a grant, else below),
      // then the other row, then the left side; the rows keep clear of the marker line
      const { x, y } = l;
      const dx = l.store ? 7 : 8;
      const up = l.store ? l.m.kind === 'ok' : l.m.kind === 'grant';
      // the text's measured extent about its baseline (the font is larger on a phone)
      const m = bboxes[i];
      const [asc, desc] = [Math.max(8, -m.y), Math.max(2, m.y + m.height)];
      const at = (side, above) => {
        const bx = side > 0 ? x + dx : x - dx - width;
        const by = above ? y - 6 - desc : y + 6 + asc;
        return { bx, by, x1: bx, x2: bx + width, y1: by - asc, y2: by + desc };
      };
      box = [at(1, up), at(1, !up), at(-1, up), at(-1, !up)].find((b) => !hit(b));
      if (box) {
        t.setAttribute('x', box.bx);
        t.setAttribute('y', box.by);
      }
    }
    if (box) boxes.push(box);
    else (l.span ? t : t.parentNode).remove();
  });
}

// ------------------------------------------------------------------ side panels

const LOG_SHOWN = 400; // a long recording's log: the latest entries (the stage and the caption say the rest)

export function renderLog(el, w) {
  const earlier = Math.max(0, w.log.length - LOG_SHOWN);
  const items = w.log.slice(earlier).map((l) => `<li class="${esc(l.cls)}"><span class="t">t=${l.t < 0 ? 0 : l.t}</span><span class="src">${esc(l.src)}</span><span class="txt">${esc(l.text)}</span></li>`);
  el.innerHTML = (earlier ? `<li class="note" data-testid="log-earlier"><span class="txt">${earlier} earlier entries not shown</span></li>` : '') + items.join('');
  el.scrollTop = el.scrollHeight;
}

export function renderState(el, w) {
  const rows = [];
  for (const s of Object.values(w.stores)) {
    const hi = w.highest(s.name);
    rows.push([w.scene.key === 'redlock' ? s.label : 'Storage', s.fencing ? 'checks fencing tokens (FenceGate)' : 'checks nothing (last writer wins)']);
    rows.push(['Highest token seen', s.fencing ? `<b data-testid="state-highest">${hi ?? '—'}</b>` : '<span class="muted">not tracked</span>']);
    const acc = s.rows.filter((r) => r.accepted);
    const ref = s.rows.filter((r) => !r.accepted);
    rows.push(['Accepted', acc.map((r) => `<span class="chip ${r.stale ? 'bad' : r.unknown ? 'unknown' : 'good'}" data-testid="accepted-${r.token}">${r.token}${r.stale ? ' (stale)' : r.unknown ? ' (writer unknown)' : ''}</span>`).join(' ') || '—']);
    rows.push(['Refused', ref.map((r) => `<span class="chip refused" data-testid="refused-${r.token}">${r.token} &lt; ${r.highest}</span>`).join(' ') || '—']);
  }
  for (const n of Object.values(w.nodes)) {
    if (w.scene.key === 'replication' || w.scene.key === 'herd') break;
    if (w.scene.key === 'redlock' && n.name !== 'svc') continue;
    rows.push(['Core revision', `${n.core.revision()} <span class="muted">(no token granted so far is above it; the next grant gets a higher one)</span>`]);
  }
  if (w.scene.key === 'permits') {
    const k = w.custom.counter;
    const p = w.nodes.svc.core.permits(w.scene.lock);
    rows.push(['Counter (simulated)', `<b data-testid="state-ctr-free" class="${k.free ? '' : 'bad'}">${k.free}</b> of ${k.limit} free <span class="muted">(no owners, no expiry)</span>`]);
    rows.push(['fencelock permits in use', `<b data-testid="state-fl-in-use">${p ? p.inUse : 0}</b> of ${p ? p.limit : w.scene.limit} <span class="muted">(the core's permits())</span>`]);
  }
  if (w.scene.key === 'herd') {
    for (const lane of ['queue', 'herd']) {
      const ids = w.scene.laneIds[lane];
      const wake = ids.reduce((a, id) => a + w.clients[id].mem.wakeups, 0);
      const wasted = ids.reduce((a, id) => a + w.clients[id].mem.wasted, 0);
      rows.push([lane === 'queue' ? 'Ordered queue' : 'Herd', `${wake} wake-ups, <b class="${wasted ? 'bad' : 'good'}">${wasted} wasted</b>`]);
    }
  }
  if (w.scene.key === 'replication') {
    const sides = w.scene.outcome(w);
    for (const [lane, label] of [['redis', 'Single Redis'], ['raft', 'Consensus']]) {
      const ids = lane === 'redis' ? ['A1', 'B1'] : ['A2', 'B2'];
      const hs = ids.filter((id) => w.clients[id].holding);
      // a grant the serving node's core does not list is lost, though its client was told it
      const lost = sides[lane].serving ? sides[lane].forgotten : [];
      const note = lost.length ? ` <span class="bad" data-testid="lost-${lane}">— ${esc(sides[lane].head)} does not list ${lost.map((h) => `${esc(h.name)}·${h.token}`).join(', ')} (grant lost)</span>` : '';
      rows.push([`${label}: clients told "granted"`, `<b class="${hs.length > 1 || lost.length ? 'bad' : 'good'}" data-testid="holders-${lane}">${hs.length}</b> ${hs.map((id) => `${w.clients[id].name}·${w.clients[id].token}`).join(', ')}${note}`]);
    }
  }
  el.innerHTML = `<table class="kv">${rows.map(([k, v]) => `<tr><th>${k}</th><td>${v}</td></tr>`).join('')}</table>`;
}

export function renderOutcome(el, w) {
  if (!w.done || !w.outcome) {
    el.hidden = true;
    el.innerHTML = '';
    delete el.dataset.kind;
    return;
  }
  const o = w.outcome;
  el.hidden = false;
  let kind = 'ok';
  let text = '';
  switch (w.scene.key) {
    case 'gc':
    case 'shardpay': {
      // from the storage's decisions (the scene's verdict), never from the switch alone
      const parts = [];
      if (o.refused.length) parts.push(o.refused.map((r) => `${r.token} refused (stale: ${r.token} < ${r.highest})`).join(', '));
      if (o.stale.length) parts.push(`stale ${o.stale.join(', ')} landed${o.corrupted ? ' beside another writer\'s data' : w.stores.store?.fencing ? ' (the storage never saw the newer token)' : ' (the storage checks no token)'}`);
      parts.push(`accepted: ${o.accepted.join(' → ') || 'nothing'}`);
      kind = o.kind === 'corrupted' || o.kind === 'stale' ? 'corrupted' : o.kind;
      text = parts.join(' · ');
      if (o.kind === 'ok') text = `No stale write reached the storage · ${text}`;
      break;
    }
    case 'election': {
      kind = o.corrupted || o.stale.length ? 'corrupted' : o.bounced.length ? 'fenced' : 'ok';
      const parts = [];
      if (o.bounced.length) parts.push(`Old leader's epoch ${o.bounced[0].token} bounced (${o.bounced[0].token} < ${o.bounced[0].highest})`);
      if (o.stale.length) parts.push(`epoch ${o.stale.join(', ')} landed after a newer leader was elected${o.fencing ? ' (the DB never saw the newer epoch)' : ' (split brain)'}`);
      if (!parts.length) parts.push(o.expired ? 'No stale action reached the DB' : 'One leader throughout');
      parts.push(o.leader ? `leader ${o.leader}, epoch ${o.epoch}` : 'no leader now');
      text = parts.join(' · ');
      break;
    }
    case 'redlock': {
      const side = (name, x, what) => {
        const p = [];
        if (x.refused.length) p.push(x.refused.map((r) => `${r.by}'s ${r.token} refused (${r.token} < ${r.highest})${r.legit ? ' while it held the lock' : ''}`).join(', '));
        if (x.stale.length) p.push(`stale ${what} ${x.stale.join(', ')} landed${x.corrupted ? ', data corrupted' : ''}`);
        if (!p.length) p.push('safe');
        return `${name}: ${p.join('; ')}`;
      };
      kind = o.redlock.safe && o.consensus.safe ? (o.consensus.refused.length ? 'fenced' : 'ok') : 'corrupted';
      text = `${side('Redlock', o.redlock, 'value')} · ${side('Consensus', o.consensus, 'token')}`;
      break;
    }
    case 'lockdelay': {
      // each late write: before or after B was granted, and whether anything wrote over it
      const parts = o.late.map((x) => `A's late write ${x.token} (t=${x.t}) ${x.drained ? 'drained before B was granted' : 'landed after B was granted'}${x.over ? `; ${x.over.by} wrote over it at t=${x.over.t}` : o.corrupted ? ': data corrupted' : '; the storage still holds it'}`);
      if (!o.late.length) parts.push('No late write');
      parts.push(`accepted: ${o.accepted.join(' → ') || 'nothing'}`);
      kind = o.late.some((x) => !x.drained || !x.over) ? 'corrupted' : 'ok';
      text = parts.join(' · ');
      break;
    }
    case 'permits': {
      const ctr = o.counter;
      const fl = o.fencelock;
      const left = ctr.waiting.length && ctr.free === 0 ? `Counter: stuck — ${ctr.waiting.map((l) => l.split(' (')[0]).join(', ')} wait forever, ${ctr.leaked.length} permit${ctr.leaked.length === 1 ? '' : 's'} leaked` : ctr.leaked.length ? `Counter: ${ctr.leaked.length} permit${ctr.leaked.length === 1 ? '' : 's'} leaked for good` : 'Counter: no permit leaked';
      const served = fl.grants.filter((g) => g.t > 0).map((g) => `${g.label.split(' (')[0]} token ${g.token}`);
      const right = `fencelock: ${fl.expiries.length ? `${fl.expiries.length} expired session${fl.expiries.length === 1 ? '' : 's'} gave ${fl.expiries.length === 1 ? 'its permit' : 'their permits'} back; ` : ''}${served.length ? `served ${served.join(', ')}` : 'nobody new served'}; at most ${fl.maxInUse} of ${w.scene.limit} in use`;
      kind = ctr.waiting.length && ctr.free === 0 ? 'stuck' : 'ok';
      text = `${left} · ${right}`;
      break;
    }
    case 'herd':
      kind = 'ok';
      text = `Ordered queue: ${o.queue.wakeups} wake-ups, ${o.queue.wasted} wasted · Herd: ${o.herd.wakeups} wake-ups, ${o.herd.wasted} wasted`;
      break;
    case 'replication':
      {
        // unsafe: two clients told "granted", or one told a grant the serving core does not list
        const lost = (x) => (x.serving ? x.forgotten : []);
        kind = o.redis.holders.length > 1 || lost(o.redis).length || o.raft.holders.length > 1 || lost(o.raft).length ? 'corrupted' : 'ok';
        const side = (x) => `${x.holders.length} holder${x.holders.length === 1 ? '' : 's'} (${x.holders.map((h) => `${h.name}·${h.token}`).join(', ')})` +
          (lost(x).length ? ` — ${x.head} does not list ${lost(x).map((h) => `${h.name}·${h.token}`).join(', ')} (grant lost)` : '');
        text = `Single Redis: ${side(o.redis)} · Consensus: ${side(o.raft)}`;
      }
      break;
    default:
      break;
  }
  el.dataset.kind = kind;
  el.innerHTML = `<b>${kind === 'fenced' ? 'Fenced' : kind === 'corrupted' ? 'Unsafe' : kind === 'stuck' ? 'Stuck' : 'Outcome'}</b> ${esc(text)}`;
}
