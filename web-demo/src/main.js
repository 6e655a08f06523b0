// The page: wires the scenes, the timeline and the renderer to the controls.
// Model = the wasm core + scene scripts (src/scenes), timeline = recorded inputs + replay
// (src/timeline.js), renderer = drawing only (src/render.js).

import { Timeline } from './timeline.js';
import { renderStage, renderSwimlane, renderLog, renderState, renderOutcome } from './render.js';
import { gcPause } from './scenes/gcpause.js';
import { herd } from './scenes/herd.js';
import { election } from './scenes/election.js';
import { replication } from './scenes/replication.js';
import { shardPay } from './scenes/shardpay.js';

const SCENES = [gcPause, herd, election, replication, shardPay];
const query = new URLSearchParams(location.search);
const TEST = query.has('test'); // no animation, fast playback: for the browser tests
const BASE_MS = TEST ? 8 : 1100;

const $ = (id) => document.getElementById(id);
const ui = {
  tabs: document.querySelector('.scenes'),
  title: $('scene-title'),
  lede: $('scene-lede'),
  stage: $('stage'),
  swimlane: $('swimlane'),
  caption: $('caption'),
  controls: $('controls'),
  state: $('state'),
  outcome: $('outcome'),
  log: $('log'),
  play: $('btn-play'),
  scrubber: $('scrubber'),
  clock: $('clock'),
  speed: $('speed'),
  speedOut: $('speed-out'),
  menu: $('menu'),
  help: $('help'),
  boot: $('boot'),
};

let api = null;
let sceneIndex = 0;
let timeline = null;
let timer = null;
const params = SCENES.map((s) => Object.fromEntries(Object.entries(s.params).map(([k, p]) => [k, p.value])));

// ------------------------------------------------------------------ boot

async function boot() {
  if (TEST) document.documentElement.classList.add('test-mode');
  try {
    const mod = await import('../pkg/fencelock_wasm.js');
    await mod.default();
    api = mod;
  } catch (e) {
    ui.boot.textContent = `Could not load the wasm core (${e.message}). Run "make demo", which builds it and copies it to web-demo/pkg/.`;
    ui.boot.classList.add('error');
    throw e;
  }
  ui.boot.textContent = '';
  buildTabs();
  const fromHash = Number((location.hash.match(/scene-(\d)/) || [])[1]);
  const fromQuery = Number(query.get('scene'));
  chooseScene((fromQuery || fromHash || 1) - 1);
  wireControls();
  document.body.dataset.ready = '1';
}

function buildTabs() {
  ui.tabs.innerHTML = SCENES.map(
    (s, i) => `<button id="tab-${i + 1}" data-scene="${i}" data-testid="tab-${i + 1}" aria-pressed="false" title="${s.title} (key ${i + 1})"><span class="n">${i + 1}</span> ${s.short}</button>`,
  ).join('');
  ui.tabs.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-scene]');
    if (b) chooseScene(Number(b.dataset.scene));
  });
}

function chooseScene(i) {
  if (!(i >= 0 && i < SCENES.length)) i = 0;
  pause();
  sceneIndex = i;
  const s = SCENES[i];
  for (const b of ui.tabs.querySelectorAll('button')) b.setAttribute('aria-pressed', String(Number(b.dataset.scene) === i));
  ui.title.textContent = s.title;
  ui.lede.textContent = s.lede;
  document.body.dataset.scene = s.key;
  if (!TEST) history.replaceState(null, '', `#scene-${i + 1}`);
  buildControls();
  rebuild(1);
}

/** A new timeline from the scene script with the current parameters; keeps the cursor. */
function rebuild(cursor) {
  timeline?.world?.dispose();
  timeline = new Timeline(api, SCENES[sceneIndex], { ...params[sceneIndex] });
  seek(cursor ?? 1);
}

// ------------------------------------------------------------------ scene controls

function buildControls() {
  const s = SCENES[sceneIndex];
  const p = params[sceneIndex];
  ui.controls.innerHTML = Object.entries(s.params)
    .map(([k, d]) => {
      if (d.type === 'switch')
        return `<label class="switch"><input type="checkbox" role="switch" data-param="${k}" data-testid="param-${k}" ${p[k] ? 'checked' : ''}><span class="track" aria-hidden="true"></span><span class="lbl">${d.label}</span></label>`;
      return `<label class="slider"><span class="lbl">${d.label}</span><input type="range" data-param="${k}" data-testid="param-${k}" min="${d.min}" max="${d.max}" step="${d.step}" value="${p[k]}"><output data-for="${k}">${p[k]}${d.unit}</output></label>`;
    })
    .join('') +
    (s.tryThis ? `<div class="try"><p class="try-h">Try this</p><ul>${s.tryThis.map((t) => `<li>${t}</li>`).join('')}</ul></div>` : '');
  for (const input of ui.controls.querySelectorAll('input[data-param]')) {
    const k = input.dataset.param;
    const d = s.params[k];
    input.addEventListener(d.type === 'switch' ? 'change' : 'input', () => {
      p[k] = d.type === 'switch' ? input.checked : Number(input.value);
      const out = ui.controls.querySelector(`output[data-for="${k}"]`);
      if (out) out.textContent = `${p[k]}${d.unit}`;
      rebuild(timeline.cursor);
    });
  }
}

// ------------------------------------------------------------------ playback

function seek(k) {
  const w = timeline.seek(k);
  draw(w);
}

const narrowQuery = window.matchMedia('(max-width: 600px)');
narrowQuery.addEventListener('change', () => timeline && draw(timeline.world));

function draw(w) {
  const tl = timeline;
  const narrow = narrowQuery.matches;
  // the stage is redrawn from scratch: keep keyboard focus on the client that had it
  const focused = document.activeElement?.closest?.('#stage [data-client]')?.dataset.client;
  renderStage(ui.stage, w, narrow);
  const lastT = lastTime(tl);
  renderSwimlane(ui.swimlane, w, lastT, narrow);
  ui.caption.textContent = w.caption;
  renderState(ui.state, w);
  renderOutcome(ui.outcome, w);
  renderLog(ui.log, w);
  ui.scrubber.max = String(tl.length);
  ui.scrubber.min = '1';
  ui.scrubber.value = String(tl.cursor);
  ui.scrubber.setAttribute('aria-valuetext', `t = ${Math.max(w.t, 0)} seconds, step ${tl.cursor} of ${tl.length}`);
  ui.clock.textContent = `t = ${Math.max(w.t, 0)} s`;
  ui.clock.dataset.step = String(tl.cursor);
  ui.clock.dataset.length = String(tl.length);
  document.body.dataset.atEnd = String(tl.cursor === tl.length);
  document.body.dataset.done = String(!!w.done);
  attachClientHandlers();
  if (focused) ui.stage.querySelector(`[data-client="${focused}"]`)?.focus();
}

function lastTime(tl) {
  // the time of the last recorded step: the first record of each step is its 'time'
  const last = tl.steps[tl.length - 1];
  const r = last.find((x) => x.op === 'time');
  return r ? r.t : 0;
}

function play() {
  if (timer) return;
  if (timeline.cursor >= timeline.length) seek(1);
  ui.play.textContent = '❚❚';
  ui.play.setAttribute('aria-label', 'Pause');
  document.body.dataset.playing = 'true';
  const tick = () => {
    if (timeline.cursor >= timeline.length) return pause();
    const before = timeline.world.log.length;
    seek(timeline.cursor + 1);
    // a step where nothing but heartbeats happens (a long pause) goes by three times faster
    const w = timeline.world;
    const quiet = w.log.length === before && w.flashes.every((f) => f.kind === 'hb');
    timer = setTimeout(tick, (BASE_MS / 2 ** Number(ui.speed.value)) * (quiet ? 0.35 : 1));
  };
  timer = setTimeout(tick, TEST ? 0 : 250);
}

function pause() {
  clearTimeout(timer);
  timer = null;
  ui.play.textContent = '▶︎';
  ui.play.setAttribute('aria-label', 'Play');
  document.body.dataset.playing = 'false';
}

const toggle = () => (timer ? pause() : play());

function showSpeed() {
  const v = 2 ** Number(ui.speed.value);
  ui.speedOut.textContent = `${v >= 1 ? Math.round(v * 10) / 10 : Math.round(v * 100) / 100}×`;
}

function wireControls() {
  ui.play.addEventListener('click', toggle);
  $('btn-step').addEventListener('click', () => (pause(), seek(timeline.cursor + 1)));
  $('btn-back').addEventListener('click', () => (pause(), seek(timeline.cursor - 1)));
  $('btn-end').addEventListener('click', () => (pause(), seek(timeline.length)));
  $('btn-reset').addEventListener('click', () => (pause(), rebuild(1)));
  ui.scrubber.addEventListener('input', () => (pause(), seek(Number(ui.scrubber.value))));
  ui.speed.addEventListener('input', showSpeed);
  showSpeed();
  document.addEventListener('keydown', onKey);
  document.addEventListener('click', (e) => {
    if (!ui.menu.hidden && !e.target.closest('#menu') && !e.target.closest('[data-client]')) closeMenu();
  });
}

function onKey(e) {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (ui.help.open) return;
  const t = e.target;
  const inField = t.closest?.('input, textarea, select');
  const onButton = t.closest?.('button, [role="button"], [role="menuitem"]');
  if (!ui.menu.hidden && e.key === 'Escape') return closeMenu(true);
  switch (e.key) {
    case ' ':
      if (onButton || (inField && t.type !== 'range')) return;
      e.preventDefault();
      return toggle();
    case 'ArrowRight':
      if (inField) return;
      e.preventDefault();
      pause();
      return seek(timeline.cursor + 1);
    case 'ArrowLeft':
      if (inField) return;
      e.preventDefault();
      pause();
      return seek(timeline.cursor - 1);
    case 'Home':
      if (inField) return;
      pause();
      return seek(1);
    case 'End':
      if (inField) return;
      pause();
      return seek(timeline.length);
    case 'r':
      pause();
      return rebuild(1);
    case 'f': {
      const sw = ui.controls.querySelector('input[role="switch"]');
      if (sw) sw.click();
      return;
    }
    case '?':
      return ui.help.showModal();
    default:
      if (/^[1-5]$/.test(e.key) && !inField) chooseScene(Number(e.key) - 1);
  }
}

// ------------------------------------------------------------------ interventions

function attachClientHandlers() {
  for (const g of ui.stage.querySelectorAll('[data-client]')) {
    g.addEventListener('click', (e) => openMenu(g.dataset.client, e));
    g.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        openMenu(g.dataset.client, e);
      }
    });
  }
}

function openMenu(id, e) {
  pause();
  const c = timeline.world.clients[id];
  const items = [];
  if (c.status === 'running') items.push(['pause', `Pause ${c.name}`]);
  if (c.status === 'paused') items.push(['resume', `Resume ${c.name}`]);
  if (c.status !== 'dead') items.push(['kill', `Kill ${c.name}`]);
  items.push(['close', 'Cancel']);
  ui.menu.innerHTML = `<p class="menu-title">${c.name} at t=${timeline.world.t}</p>` + items.map(([a, l]) => `<button role="menuitem" data-action="${a}" data-testid="menu-${a}">${l}</button>`).join('');
  const node = e.currentTarget.getBoundingClientRect ? e.currentTarget.getBoundingClientRect() : { left: 0, bottom: 0 };
  ui.menu.style.left = `${Math.min(window.scrollX + node.left, window.scrollX + document.documentElement.clientWidth - 200)}px`;
  ui.menu.style.top = `${window.scrollY + node.bottom + 4}px`;
  ui.menu.hidden = false;
  ui.menu.dataset.forClient = id;
  ui.menu.querySelector('button').focus();
  ui.menu.onclick = (ev) => {
    const b = ev.target.closest('button[data-action]');
    if (!b) return;
    const a = b.dataset.action;
    closeMenu(true);
    if (a === 'close') return;
    const set = a === 'pause' ? { status: 'paused', pausedBy: 'you' } : a === 'resume' ? { status: 'running', pausedBy: null } : { status: 'dead' };
    const w = timeline.intervene([{ op: 'client', id, set }, { op: 'caption', text: `You ${a === 'kill' ? 'killed' : a === 'pause' ? 'paused' : 'resumed'} ${c.name} at t=${timeline.world.t}. The future is recomputed from here by the real core.` }]);
    draw(w);
    ui.stage.querySelector(`[data-client="${id}"]`)?.focus();
  };
  ui.menu.onkeydown = (ev) => {
    const bs = [...ui.menu.querySelectorAll('button')];
    const i = bs.indexOf(document.activeElement);
    if (ev.key === 'ArrowDown') (bs[(i + 1) % bs.length].focus(), ev.preventDefault());
    if (ev.key === 'ArrowUp') (bs[(i - 1 + bs.length) % bs.length].focus(), ev.preventDefault());
  };
}

function closeMenu(refocus) {
  const id = ui.menu.dataset.forClient;
  ui.menu.hidden = true;
  if (refocus && id) ui.stage.querySelector(`[data-client="${id}"]`)?.focus();
}

// Deterministic hooks for the browser tests (no sleeping): read-only views of the model.
window.fencelockDemo = {
  get cursor() {
    return timeline.cursor;
  },
  get length() {
    return timeline.length;
  },
  get outcome() {
    return timeline.world.outcome;
  },
  get scene() {
    return SCENES[sceneIndex].key;
  },
};

boot();
