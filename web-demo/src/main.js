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
import { redlock } from './scenes/redlock.js';
import { lockDelay } from './scenes/lockdelay.js';
import { permits } from './scenes/permits.js';
import { milestoneMark, captionsOf, termsAt } from './story.js';
import { verifyRecording, RecordingError, LIMITS } from './recording.js';
import { replayScene } from './scenes/replay.js';
import { fmtTime, fmtTimeLong } from './units.js';

const SCENES = [gcPause, herd, election, replication, shardPay, redlock, lockDelay, permits];
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
  captionLive: $('caption-live'),
  keys: $('keys'),
  terms: $('terms'),
  dock: $('dock'),
  dockMore: $('dock-more'),
  story: $('story'),
  interventions: $('interventions'),
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
let captions = []; // the caption of every recorded step (for first uses of terms)
// Your interventions per scene, {step, t, id, name, action}: replayed into every rebuilt
// timeline (after the switch, a slider, a return to the scene) so none vanishes silently.
const kept = SCENES.map(() => []);
let droppedNote = '';
// Story mode per scene: on when a scene first opens, off once its own story has ended (free
// play) or you turned it off; another scene keeps its own.
const storyOn = SCENES.map(() => true);
const params = SCENES.map((s) => Object.fromEntries(Object.entries(s.params).map(([k, p]) => [k, p.value])));
// Single-key shortcuts (space, r, s, f, 1–9, ?) can be turned off ("single-key shortcuts" in
// "Try it"), for speech input and stray key presses; the page remembers the choice. The
// arrows, Home, End, Enter and Escape are not character keys and always work.
const KEYS_STORE = 'fencelock-demo.single-keys';
const storedKeys = () => {
  try {
    return localStorage.getItem(KEYS_STORE) !== 'off';
  } catch {
    return true;
  }
};

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
  // the hash is what the page itself keeps current (and what a shared link carries last)
  const fromHash = Number((location.hash.match(/scene-(\d+)/) || [])[1]);
  const fromQuery = Number(query.get('scene'));
  chooseScene((fromHash || fromQuery || 1) - 1);
  wireControls();
  wireRecordings();
  document.body.dataset.ready = '1';
}

function buildTabs() {
  renderTabs();
  ui.tabs.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-scene]');
    if (b) chooseScene(Number(b.dataset.scene));
  });
}

function renderTabs() {
  ui.tabs.innerHTML = SCENES.map(
    // the accessible name is the visible text ("4 Replication"; a phone shows the number
    // only), so a voice command naming what is on screen reaches it; the title describes it
    (s, i) => `<button id="tab-${i + 1}" data-scene="${i}" data-testid="tab-${i + 1}" aria-pressed="false" title="${escHtml(s.title)} (key ${i + 1})" aria-label="${i + 1} ${escHtml(s.short)}"><span class="n">${i + 1}</span> <span class="lbl">${escHtml(s.short)}</span></button>`,
  ).join('');
  for (const b of ui.tabs.querySelectorAll('button')) b.setAttribute('aria-pressed', String(Number(b.dataset.scene) === sceneIndex));
}

// ------------------------------------------------------------------ recordings

const REPLAY = 8; // the opened recording's place among the scenes (key 9)

/** Replays a recording's text into a fresh core, line by line; shows it, or says which line failed. */
function openRecording(text, name) {
  const err = $('rec-error');
  let rec;
  try {
    rec = verifyRecording(api, text);
  } catch (e) {
    err.textContent = `Could not open ${name}: ${e instanceof RecordingError ? e.message : `unexpected error: ${e?.message ?? e}`}. The page keeps what it showed.`;
    err.hidden = false;
    document.body.dataset.recording = 'error';
    return false;
  }
  err.hidden = true;
  pause();
  // what the page shows now, to go back to if the verified recording still cannot be shown
  // (a page bug, or no memory left for its cores)
  const was = { scene: SCENES[REPLAY], params: params[REPLAY], kept: kept[REPLAY], story: storyOn[REPLAY], index: sceneIndex, cursor: timeline.cursor };
  try {
    SCENES[REPLAY] = replayScene(rec, name);
    params[REPLAY] = {};
    kept[REPLAY] = [];
    storyOn[REPLAY] = true;
    renderTabs();
    chooseScene(REPLAY);
  } catch (e) {
    if (was.scene) SCENES[REPLAY] = was.scene;
    else SCENES.length = REPLAY;
    params[REPLAY] = was.params;
    kept[REPLAY] = was.kept;
    storyOn[REPLAY] = was.story;
    renderTabs();
    chooseScene(was.index, was.cursor);
    err.textContent = `Could not open ${name}: unexpected error: ${e?.message ?? e}. The page keeps what it showed.`;
    err.hidden = false;
    document.body.dataset.recording = 'error';
    return false;
  }
  document.body.dataset.recording = 'open';
  return true;
}

async function openRecordingFile(file) {
  if (!file) return;
  if (file.size > LIMITS.bytes) {
    const err = $('rec-error');
    err.textContent = `Could not open ${file.name}: it is ${file.size} bytes, more than the ${LIMITS.bytes} this page reads.`;
    err.hidden = false;
    document.body.dataset.recording = 'error';
    return;
  }
  let text;
  try {
    text = await file.text();
  } catch (e) {
    const err = $('rec-error');
    err.textContent = `Could not open ${file.name}: the browser could not read it (${e?.message ?? e}). The page keeps what it showed.`;
    err.hidden = false;
    document.body.dataset.recording = 'error';
    return;
  }
  openRecording(text, file.name);
}

function wireRecordings() {
  // the header's control, and the one a phone shows in "Try it" (each focusable where shown)
  for (const input of [$('rec-file'), $('rec-file-phone')]) {
    input.addEventListener('change', () => {
      openRecordingFile(input.files[0]);
      input.value = '';
    });
  }
  document.addEventListener('dragover', (e) => {
    if ([...(e.dataTransfer?.types ?? [])].includes('Files')) {
      e.preventDefault();
      document.body.classList.add('dropping');
    }
  });
  document.addEventListener('dragleave', (e) => {
    if (!e.relatedTarget) document.body.classList.remove('dropping');
  });
  document.addEventListener('drop', (e) => {
    document.body.classList.remove('dropping');
    const file = e.dataTransfer?.files?.[0];
    if (!file) return;
    e.preventDefault();
    openRecordingFile(file);
  });
}

/** Jumps to the next step after the cursor whose line names the query (wrapping round). */
function searchNext(q) {
  const s = SCENES[sceneIndex];
  const out = ui.controls.querySelector('[data-testid=search-out]');
  const hits = s.find ? s.find(q) : [];
  if (!hits.length) {
    out.textContent = q.trim() ? `no line names "${q.trim()}"` : '';
    return;
  }
  const next = hits.find((k) => k > timeline.cursor) ?? hits[0];
  pause();
  seek(next);
  out.textContent = `match ${hits.indexOf(next) + 1} of ${hits.length} (line ${next})`;
}

function chooseScene(i, cursor = 1) {
  if (!(i >= 0 && i < SCENES.length && SCENES[i])) i = 0;
  pause();
  sceneIndex = i;
  const s = SCENES[i];
  for (const b of ui.tabs.querySelectorAll('button')) b.setAttribute('aria-pressed', String(Number(b.dataset.scene) === i));
  // a phone's tab row scrolls sideways: keep the chosen scene's tab in view
  ui.tabs.querySelector('[aria-pressed="true"]')?.scrollIntoView?.({ block: 'nearest', inline: 'nearest' });
  ui.title.textContent = s.title;
  ui.lede.textContent = s.lede;
  $('scene-lede-2').textContent = s.lede; // a phone shows the lede under the stage, not above it
  // a recording's sessions take no intervention: the hint says so instead of offering one
  $('hint-clients').textContent = s.key === 'replay'
    ? 'A recording is what happened: its sessions cannot be paused, resumed or killed.'
    : 'Click a client (or focus it and press Enter) to pause, resume or kill it. The future is recomputed from there.';
  document.body.dataset.scene = s.key;
  ui.story.checked = storyOn[i] ?? true;
  document.body.dataset.story = String(ui.story.checked);
  if (!TEST) history.replaceState(null, '', `#scene-${i + 1}`);
  buildControls();
  rebuild(cursor);
}

/** What an intervention does to the client, as records (the same on every replay). */
function interventionRecords(iv) {
  const set = iv.action === 'pause' ? { status: 'paused', pausedBy: 'you' } : iv.action === 'resume' ? { status: 'running', pausedBy: null } : { status: 'dead' };
  const verb = { kill: 'killed', pause: 'paused', resume: 'resumed' }[iv.action];
  return [
    { op: 'client', id: iv.id, set },
    { op: 'milestone', n: null, label: `you ${iv.action} ${iv.name}`, focus: [iv.id], yours: true },
    { op: 'caption', text: `You ${verb} ${iv.name} at t=${iv.t}. The future is recomputed from here by the real core.` },
  ];
}

/** Can this intervention be applied to the world as it is now? (else: why not) */
function applicable(iv, w) {
  const c = w.clients[iv.id];
  if (!c) return `${iv.name} does not exist in this version`;
  if (iv.action === 'kill' && c.status === 'dead') return `${iv.name} is already dead at t=${iv.t}`;
  if (iv.action === 'pause' && c.status !== 'running') return `${iv.name} is not running at t=${iv.t}`;
  if (iv.action === 'resume' && c.status !== 'paused') return `${iv.name} is not paused at t=${iv.t}`;
  return null;
}

/**
 * A new timeline from the scene script with the current parameters; replays your kept
 * interventions into it (each at its step), drops the ones that no longer apply with a
 * visible note, and keeps the cursor. The new timeline is built whole before the old one is
 * let go: if building it throws, the page still has the old one, with its cores alive.
 */
function rebuild(cursor, { forget = false } = {}) {
  const next = new Timeline(api, SCENES[sceneIndex], { ...params[sceneIndex] });
  const dropped = [];
  const list = forget ? [] : kept[sceneIndex];
  if (forget && kept[sceneIndex].length) dropped.push(`reset: ${kept[sceneIndex].length} intervention${kept[sceneIndex].length > 1 ? 's' : ''} removed`);
  const still = [];
  try {
    for (const iv of list) {
      if (iv.step > next.length) {
        dropped.push(`${describe(iv)} dropped: the scene now ends at t=${lastTime(next)}`);
        continue;
      }
      const why = applicable(iv, next.seek(iv.step));
      if (why) {
        dropped.push(`${describe(iv)} dropped: ${why}`);
        continue;
      }
      next.intervene(interventionRecords(iv));
      still.push(iv);
    }
  } catch (e) {
    next.world?.dispose();
    throw e;
  }
  timeline?.world?.dispose();
  timeline = next;
  kept[sceneIndex] = still;
  droppedNote = dropped.join('; ');
  captions = captionsOf(timeline);
  seek(cursor ?? 1);
}

const describe = (iv) => `${iv.action} ${iv.name} at t=${iv.t}`;

function showInterventions() {
  const list = kept[sceneIndex];
  const parts = [];
  if (list.length) parts.push(`Your interventions, replayed after every change: ${list.map((iv) => `<span class="iv" data-testid="iv">${describe(iv)}</span>`).join(', ')}.`);
  if (droppedNote) parts.push(`<span class="dropped" data-testid="iv-dropped">${droppedNote}.</span>`);
  ui.interventions.hidden = parts.length === 0;
  writeLive(ui.interventions, parts.join(' '));
}

// What each live region (role=status) shows: a screen reader announces every write to one,
// so a region is written only when its text changes, not on every draw.
const written = new WeakMap();
function writeLive(el, html) {
  if (written.get(el) === html) return;
  written.set(el, html);
  el.innerHTML = html;
}

// ------------------------------------------------------------------ scene controls

function buildControls() {
  const s = SCENES[sceneIndex];
  const p = params[sceneIndex];
  ui.controls.innerHTML = Object.entries(s.params)
    .map(([k, d]) => {
      if (d.type === 'choice')
        return `<label class="slider choice"><span class="lbl">${d.label}</span><select data-param="${k}" data-testid="param-${k}">${d.options.map(([v, l]) => `<option value="${v}" ${p[k] === v ? 'selected' : ''}>${l}</option>`).join('')}</select></label>`;
      if (d.type === 'switch')
        return `<label class="switch"><input type="checkbox" role="switch" data-param="${k}" data-testid="param-${k}" ${p[k] ? 'checked' : ''}><span class="track" aria-hidden="true"></span><span class="lbl">${d.label}</span></label>`;
      return `<label class="slider"><span class="lbl">${d.label}</span><input type="range" data-param="${k}" data-testid="param-${k}" min="${d.min}" max="${d.max}" step="${d.step}" value="${p[k]}"><output data-for="${k}">${p[k]}${d.unit}</output></label>`;
    })
    .join('') +
    (s.find
      ? `<form class="rec-search" data-testid="rec-search"><label><span class="lbl">Find a lock or session</span><input type="search" data-testid="search" placeholder="jobs/reindex, session 2, 2" list="rec-names"></label><datalist id="rec-names">${[...s.locks, ...s.sessions.map((x) => `session ${x}`)].map((x) => `<option value="${escHtml(String(x))}">`).join('')}</datalist><button type="submit" data-testid="search-next">next match</button><output data-testid="search-out" aria-live="polite"></output></form>`
      : '') +
    (s.tryThis ? `<div class="try"><p class="try-h">Try this</p><ul>${s.tryThis.map((t) => `<li>${t}</li>`).join('')}</ul></div>` : '');
  ui.controls.querySelector('.rec-search')?.addEventListener('submit', (e) => {
    e.preventDefault();
    searchNext(ui.controls.querySelector('[data-testid=search]').value);
  });
  for (const input of ui.controls.querySelectorAll('[data-param]')) {
    const k = input.dataset.param;
    const d = s.params[k];
    const out = ui.controls.querySelector(`output[data-for="${k}"]`);
    const show = (v) => {
      if (d.type === 'switch') input.checked = v;
      else input.value = String(v);
      if (out) out.textContent = `${v}${d.unit ?? ''}`;
    };
    input.addEventListener(d.type === 'range' ? 'input' : 'change', () => {
      const before = p[k];
      p[k] = d.type === 'switch' ? input.checked : d.type === 'choice' ? input.value : Number(input.value);
      if (out) out.textContent = `${p[k]}${d.unit ?? ''}`;
      try {
        rebuild(timeline.cursor);
      } catch (e) {
        // the page keeps the timeline it had: the control shows the value that timeline has
        p[k] = before;
        show(before);
        throw e;
      }
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
  if (!ui.menu.hidden) closeMenu(false); // its title names a time that is no longer now
  // the stage is redrawn from scratch: keep keyboard focus on the client that had it
  const focused = document.activeElement?.closest?.('#stage [data-client]')?.dataset.client;
  renderStage(ui.stage, w, narrow);
  const lastT = lastTime(tl);
  renderSwimlane(ui.swimlane, w, lastT, narrow);
  const m = w.milestone;
  const before = ui.caption.textContent;
  writeLive(ui.caption, `${m ? `<span class="ms" data-testid="milestone" data-n="${m.n ?? ''}" aria-label="${m.yours ? 'your intervention' : m.n == null ? 'outcome' : `milestone ${m.n}`}">${m.yours ? '✋' : milestoneMark(m.n)}</span> ` : ''}<span class="txt" data-testid="caption-text">${escHtml(w.caption)}</span>`);
  ui.caption.dataset.milestone = m ? (m.yours ? 'yours' : String(m.n ?? 'outcome')) : '';
  const terms = termsAt(captions, tl.cursor, w.scene.key);
  ui.terms.innerHTML = terms.map((d) => `<p class="def" data-term="${escHtml(d.term)}"><dfn>${escHtml(d.term)}</dfn> — ${escHtml(d.def)}</p>`).join('');
  if (ui.caption.textContent !== before) ui.dock.scrollTop = 0; // a new caption is read from its start
  // while playing, a screen reader is told the milestones only (every step would queue
  // announcement after announcement); when playback stops it is told where it stopped
  if (!timer || m) announce();
  dockHint();
  renderState(ui.state, w);
  renderOutcome(ui.outcome, w);
  renderLog(ui.log, w);
  showInterventions();
  ui.scrubber.max = String(tl.length);
  ui.scrubber.min = '1';
  ui.scrubber.value = String(tl.cursor);
  ui.scrubber.setAttribute('aria-valuetext', `t = ${fmtTimeLong(Math.max(w.t, 0), w.scene.tickMs)}, step ${tl.cursor} of ${tl.length}${m ? `, ${m.yours ? 'your intervention' : m.n == null ? 'outcome' : `milestone ${m.n}`}: ${m.label}` : ''}`);
  ui.clock.innerHTML = `<span class="tl">t = </span>${fmtTime(Math.max(w.t, 0), w.scene.tickMs)}`; // in the scene's tick (a recording's may be 1 ms)
  ui.clock.dataset.step = String(tl.cursor);
  ui.clock.dataset.length = String(tl.length);
  document.body.dataset.atEnd = String(tl.cursor === tl.length);
  document.body.dataset.done = String(!!w.done);
  document.body.dataset.story = String(ui.story.checked);
  attachClientHandlers();
  if (focused) ui.stage.querySelector(`[data-client="${focused}"]`)?.focus();
}

const escHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

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
    if (timeline.cursor >= timeline.length) return finished();
    const before = timeline.world.log.length;
    seek(timeline.cursor + 1);
    const w = timeline.world;
    // story mode: stop at each milestone, so its caption can be read with its picture
    if (ui.story.checked && w.milestone && timeline.cursor < timeline.length) return pause();
    // a step where nothing but heartbeats happens (a long pause) goes by three times faster
    const quiet = w.log.length === before && w.flashes.every((f) => f.kind === 'hb');
    timer = setTimeout(tick, (BASE_MS / 2 ** Number(ui.speed.value)) * (quiet ? 0.35 : 1));
  };
  timer = setTimeout(tick, TEST ? 0 : 250);
}

/**
 * The caption box has a fixed height (its length moves nothing on the page); when its text
 * runs past the bottom edge, the "more below" bar shows, until the end is in view.
 */
function dockHint() {
  const d = ui.dock;
  const below = d.scrollHeight - d.scrollTop - d.clientHeight;
  ui.dockMore.hidden = below <= 2;
}
ui.dock.addEventListener('scroll', dockHint, { passive: true });
window.addEventListener('resize', dockHint);
const reducedMotion = window.matchMedia('(prefers-reduced-motion: reduce)');
ui.dockMore.addEventListener('click', () => ui.dock.scrollBy({ top: ui.dock.clientHeight - 32, behavior: TEST || reducedMotion.matches ? 'auto' : 'smooth' }));

/** The end of the recorded story: after it, play is free play (no stops). */
function finished() {
  pause();
  if (ui.story.checked) {
    ui.story.checked = false;
    storyOn[sceneIndex] = false;
    document.body.dataset.story = 'false';
    ui.terms.insertAdjacentHTML('beforeend', '<p class="def free" data-testid="free-play">The story is over: free play. Playback no longer stops at milestones (press <kbd>s</kbd> or tick “story” to bring the stops back). Change a switch or a slider, or click a client to pause, resume or kill it.</p>');
    dockHint();
  }
}

function pause() {
  const playing = timer != null;
  clearTimeout(timer);
  timer = null;
  ui.play.textContent = '▶︎';
  ui.play.setAttribute('aria-label', 'Play');
  document.body.dataset.playing = 'false';
  if (playing) announce(); // where playback stopped
}

/** Writes the caption now shown to the live region a screen reader announces (when it changed). */
function announce() {
  const w = timeline.world;
  const m = w.milestone;
  const mark = m ? `${m.yours ? 'Your intervention' : m.n == null ? 'Outcome' : `Milestone ${m.n}`}: ` : '';
  writeLive(ui.captionLive, escHtml(`${mark}${w.caption}`));
}

const toggle = () => (timer ? pause() : play());

function showSpeed() {
  const v = 2 ** Number(ui.speed.value);
  ui.speedOut.textContent = `${v >= 1 ? Math.round(v * 10) / 10 : Math.round(v * 100) / 100}×`;
  // spoken as the speed it gives, not the slider's log-scale number
  ui.speed.setAttribute('aria-valuetext', `${ui.speedOut.textContent} speed`);
}

function wireControls() {
  ui.play.addEventListener('click', toggle);
  $('btn-step').addEventListener('click', () => (pause(), seek(timeline.cursor + 1)));
  $('btn-back').addEventListener('click', () => (pause(), seek(timeline.cursor - 1)));
  $('btn-end').addEventListener('click', () => (pause(), seek(timeline.length)));
  $('btn-reset').addEventListener('click', () => (pause(), rebuild(1, { forget: true })));
  ui.story.addEventListener('change', () => {
    storyOn[sceneIndex] = ui.story.checked;
    document.body.dataset.story = String(ui.story.checked);
  });
  ui.scrubber.addEventListener('input', () => (pause(), seek(Number(ui.scrubber.value))));
  ui.speed.addEventListener('input', showSpeed);
  showSpeed();
  ui.keys.checked = storedKeys();
  ui.keys.addEventListener('change', () => {
    try {
      localStorage.setItem(KEYS_STORE, ui.keys.checked ? 'on' : 'off');
    } catch {
      // a browser that keeps no storage: the choice holds for this visit
    }
  });
  document.addEventListener('keydown', onKey);
  document.addEventListener('click', (e) => {
    if (!ui.menu.hidden && !e.target.closest('#menu') && !e.target.closest('[data-client]')) closeMenu();
  });
  // focus moved out of the menu to another control: it closes, as on a click outside. (Focus
  // that goes nowhere — a click on a button some browsers do not focus — is left to the click.)
  ui.menu.addEventListener('focusout', (e) => {
    if (!ui.menu.hidden && e.relatedTarget && !ui.menu.contains(e.relatedTarget)) closeMenu(false);
  });
}

function onKey(e) {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (ui.help.open) return;
  const t = e.target;
  const inField = t.closest?.('input, textarea, select');
  // a field that takes text (the recording's search box): every key is its own, letters too
  const typing = t.isContentEditable || t.closest?.('textarea, select') ||
    (t.tagName === 'INPUT' && !['range', 'checkbox', 'radio', 'button', 'submit', 'reset'].includes(t.type));
  const onButton = t.closest?.('button, [role="button"], [role="menuitem"]');
  if (!ui.menu.hidden && e.key === 'Escape') return closeMenu(true);
  // single-key shortcuts turned off: a character key does only what the focused control does
  if (!ui.keys.checked && (e.key === ' ' || e.key.length === 1)) return;
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
      e.preventDefault(); // the key moves the story, not the page
      pause();
      return seek(1);
    case 'End':
      if (inField) return;
      e.preventDefault();
      pause();
      return seek(timeline.length);
    case 'r':
      if (typing) return;
      pause();
      return rebuild(1, { forget: true });
    case 's':
      if (typing) return;
      ui.story.checked = !ui.story.checked;
      storyOn[sceneIndex] = ui.story.checked;
      document.body.dataset.story = String(ui.story.checked);
      return;
    case 'f': {
      if (typing) return;
      // the fencing switch only: a scene without one (scene 8's switch is its crash) ignores the key
      const sw = ui.controls.querySelector('input[data-param="fencing"]');
      if (sw) sw.click();
      return;
    }
    case '?':
      if (typing) return;
      return ui.help.showModal();
    default:
      if (/^[1-9]$/.test(e.key) && Number(e.key) <= SCENES.length && !inField) chooseScene(Number(e.key) - 1);
  }
}

// ------------------------------------------------------------------ interventions

function attachClientHandlers() {
  // a recording is what happened: its sessions are not yours to pause or kill
  if (SCENES[sceneIndex].key === 'replay') return;
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
  ui.menu.innerHTML = `<p class="menu-title" id="menu-title">${escHtml(c.name)} at t=${timeline.world.t}</p>` + items.map(([a, l]) => `<button role="menuitem" data-action="${a}" data-testid="menu-${a}">${escHtml(l)}</button>`).join('');
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
    const w0 = timeline.world;
    const iv = { step: timeline.cursor, t: w0.t, id, name: c.name, action: a };
    // an earlier intervention rewrites the future, so later ones are gone from it
    const later = kept[sceneIndex].filter((x) => x.step > iv.step);
    kept[sceneIndex] = kept[sceneIndex].filter((x) => x.step <= iv.step).concat(iv);
    droppedNote = later.length ? `${later.map(describe).join(', ')} dropped: your change at t=${iv.t} rewrote the future they were in` : '';
    const w = timeline.intervene(interventionRecords(iv));
    captions = captionsOf(timeline);
    draw(w);
    ui.stage.querySelector(`[data-client="${CSS.escape(String(id))}"]`)?.focus();
  };
  ui.menu.onkeydown = (ev) => {
    const bs = [...ui.menu.querySelectorAll('button')];
    const i = bs.indexOf(document.activeElement);
    if (ev.key === 'ArrowDown') (bs[(i + 1) % bs.length].focus(), ev.preventDefault());
    if (ev.key === 'ArrowUp') (bs[(i - 1 + bs.length) % bs.length].focus(), ev.preventDefault());
    // Tab leaves a menu and closes it: focus goes back to its client, and the key then moves
    // on from there, to the next control after (or, with Shift, before) that client
    if (ev.key === 'Tab') closeMenu(true);
  };
}

function closeMenu(refocus) {
  const id = ui.menu.dataset.forClient;
  ui.menu.hidden = true;
  if (refocus && id) ui.stage.querySelector(`[data-client="${CSS.escape(String(id))}"]`)?.focus();
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
  /** The milestones recorded for this run: [{step, t, n, label}] (read-only copy). */
  get milestones() {
    const out = [];
    timeline.steps.forEach((records, i) => {
      let t = null;
      for (const r of records) {
        if (r.op === 'time') t = r.t;
        if (r.op === 'milestone') out.push({ step: i + 1, t, n: r.n, label: r.label, yours: !!r.yours });
      }
    });
    return out;
  },
  /** The storage's decisions so far, as recorded rows (for checking the captions). */
  get rows() {
    return Object.fromEntries(Object.entries(timeline.world.stores).map(([k, s]) => [k, JSON.parse(JSON.stringify(s.rows))]));
  },
  /** What each storage holds now, part by part: {part: {by, token, stale}} (copies). */
  get contents() {
    return Object.fromEntries(Object.entries(timeline.world.stores).map(([k, s]) => [k, JSON.parse(JSON.stringify(s.contents))]));
  },
  get interventions() {
    return kept[sceneIndex].map((x) => ({ ...x }));
  },
  /** What core `node` answers now about `lock`: its permits, holders, waiters, sessions (copies). */
  inspect(node, lock) {
    const core = timeline.world.nodes[node]?.core;
    if (!core) return null;
    const copy = (v) => JSON.parse(JSON.stringify(v ?? null));
    return { permits: copy(core.permits(lock)), holders: copy(core.holders(lock)), waiters: copy(core.waiters(lock)), sessions: copy(core.sessions().map((x) => core.session(x))), revision: core.revision() };
  },
};

boot();
