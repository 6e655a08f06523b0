// Recordings: what a lock service applied over a window, in a line-based format that a host
// (this module's Recorder, over the wasm LockService) or a server can write, and that the
// demo replays into a fresh core, checking every answer. The format is described in
// docs/RECORDING.md. Plain ES module, no DOM: it runs in a browser and in node.
//
// Every line is `<JSON>\t<crc32>`: one JSON object, a tab, and the CRC-32 (IEEE) of the JSON
// text's UTF-8 bytes as 8 lowercase hex digits. Line 1 is the header, every other line one
// applied input (or one storage decision), and in version 2 the last line is the end line,
// `{"end":{"lines":N}}`, N the lines before it (a file cut short is refused). Nothing in a recording is trusted: sizes are
// limited, every line's checksum and shape is checked, and every answer is compared with
// the one the real core gives when the input is replayed.

export const FORMAT = 'fencelock-recording';
/** The version this module writes (2: with an end line); it reads 1 and 2. */
export const VERSION = 2;
const READS = [1, 2];
/** The most bytes an end line takes, its line break included (N up to 20 000). */
const END_ROOM = 48;
const endLine = (n) => line({ end: { lines: n } });
/** Limits on what the page will read: bytes of a file, lines, bytes of one line. */
export const LIMITS = { bytes: 8 * 1024 * 1024, lines: 20000, lineBytes: 16 * 1024, rows: 65536 };

/** A tick's length (the header's `tick_ms`) when the header does not say: one second. */
export const DEFAULT_TICK_MS = 1000;
/** The longest tick a header may say: one day. */
export const MAX_TICK_MS = 86400000;
const isTickMs = (x) => Number.isSafeInteger(x) && x >= 1 && x <= MAX_TICK_MS;

const INPUT_KINDS = new Set(['open_session', 'open_labeled', 'keep_alive', 'close_session', 'acquire', 'release', 'cancel', 'tick', 'watch', 'unwatch', 'release_hold']);

// ------------------------------------------------------------------ CRC-32 (IEEE 802.3)

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n += 1) {
    let c = n;
    for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC-32 of a string's UTF-8 bytes, as 8 lowercase hex digits. Cost: O(length). */
export function crc32(text) {
  const bytes = new TextEncoder().encode(text);
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return ((c ^ 0xffffffff) >>> 0).toString(16).padStart(8, '0');
}

const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');

function unhex(s) {
  if (typeof s !== 'string' || s.length % 2 || !/^[0-9a-f]*$/.test(s)) return null;
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i += 1) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** A JSON text of `v`, refusing what JSON cannot carry exactly (bigints). */
function json(v) {
  return JSON.stringify(v, (_, x) => {
    if (typeof x === 'bigint') throw new RangeError('a recording holds numbers up to 2^53 - 1; this value is a bigint');
    return x;
  });
}

const line = (obj) => {
  const text = json(obj);
  return `${text}\t${crc32(text)}`;
};

// ------------------------------------------------------------------ writing

/**
 * Records what a wasm `LockService` applies, in the recording format. Wrap the service
 * once, before its first input of the window; then call `handle(input)` instead of
 * `svc.handle(input)` (same argument, same answer, same throw), and `admit(...)` for each
 * storage decision you want the replay to show. `text()` is the recording so far.
 *
 * Cost: one snapshot at construction (O(tables)), then O(size of the answer) per input.
 * Errors: whatever `svc.handle` throws is rethrown; a refusal by the core is recorded first
 * (its advance to `now` stood), a binding refusal (`out_of_range`, `bad_argument`) is not
 * recorded (nothing was applied). A value a JSON number cannot hold exactly throws a
 * `RangeError` before anything is recorded.
 */
export class Recorder {
  /**
   * @param svc    the wasm LockService (its state now is the recording's start)
   * @param source free text naming where this comes from (a host, a cluster, a test)
   * @param tickMs how many milliseconds one tick of `now` is (the header's `tick_ms`); left
   *               out, the header says nothing and a reader takes a tick as one second.
   *               Throws a RangeError, before anything is recorded, unless it is a whole
   *               number from 1 to MAX_TICK_MS. A service with more than LIMITS.rows
   *               sessions, locks or claims is a RangeError too (a reader would refuse
   *               to make its core).
   */
  constructor(svc, { source = 'host', tickMs } = {}) {
    if (tickMs !== undefined && !isTickMs(tickMs)) throw new RangeError(`tickMs must be a whole number of milliseconds from 1 to ${MAX_TICK_MS}, not ${String(tickMs)}`);
    const capacity = svc.capacity();
    for (const k of ['sessions', 'locks', 'claims']) {
      if (capacity[k] > LIMITS.rows) throw new RangeError(`a recording's core has at most ${LIMITS.rows} ${k}, this service ${capacity[k]}`);
    }
    this.svc = svc;
    /** A tick in ms, as a reader takes it: a line's `now` times it must be exact (below 2^53). */
    this.tickMs = tickMs ?? DEFAULT_TICK_MS;
    this.lines = [];
    this.bytes = 0;
    /** The latest `now` written: a line's `now` never goes back (the reader refuses it). */
    this.last = 0;
    /** The resources admitted so far: each one's fence starts empty in the replay. */
    this.resources = new Set();
    const header = line({ format: FORMAT, version: VERSION, source, ...(tickMs === undefined ? {} : { tick_ms: tickMs }), capacity, config: svc.config(), snapshot: hex(svc.snapshot()) });
    const fault = this.#overLimits(header);
    if (fault) throw new RangeError(`the header ${fault} (a service of many sessions, or a long source, writes a header the reader refuses)`);
    this.#add(header);
  }

  /** Why `text`, added as the next line, would make a recording the reader refuses; null when it fits. */
  #overLimits(text) {
    // Room is kept for the end line `text()` adds.
    const n = utf8Length(text);
    if (n > LIMITS.lineBytes) return `is ${n} bytes, over the ${LIMITS.lineBytes} a line may be`;
    if (this.lines.length + 2 > LIMITS.lines) return `would be line ${this.lines.length + 1}, past the ${LIMITS.lines - 1} a recording may have before its end line`;
    if (this.bytes + n + 1 + END_ROOM > LIMITS.bytes) return `would make the recording ${this.bytes + n + 1} bytes and its end line, over the ${LIMITS.bytes} it may be`;
    return null;
  }

  #add(text) {
    this.lines.push(text);
    this.bytes += utf8Length(text) + 1;
  }

  /**
   * Refuses, before anything is applied, a line the recording has no room for or whose
   * `now` goes back (below a storage decision's: one below the service's own time is the
   * core's `time_went_backwards`, thrown as the service throws it).
   */
  #admissible(now, service) {
    if (this.lines.length + 2 > LIMITS.lines) throw new RangeError(`a recording has at most ${LIMITS.lines} lines, its end line included: this one is full`);
    const own = service ? Number(this.svc.now()) : -1;
    if (typeof now === 'number' && now < this.last && now >= own) throw new RangeError(`a recording's times never go back: now ${now} after ${this.last}`);
    if (typeof now === 'number' && now * this.tickMs > Number.MAX_SAFE_INTEGER) throw new RangeError(`a recording's times are at most 2^53 - 1 ms: now ${now} is ticks of ${this.tickMs} ms past it`);
  }

  /**
   * Applies `input` ({kind, now, …}, as LockService.handle takes it) and records it.
   * Throws a RangeError before applying an input that holds a bigint, or whose answer
   * would: a session's deadline (`now` + its ttl) past 2^53 − 1. Should an answer still
   * hold one (a token past 2^53 − 1, from a snapshot that started there), the input
   * stands but the recorder stops: it throws for it and for every later call, as its
   * lines no longer follow the service.
   */
  handle(given) {
    this.#usable();
    // Read once, as the text it is recorded as (a bigint cannot be recorded: refused before
    // anything is applied): what is applied is what is recorded, even from an object whose
    // getters answer differently each time they are read.
    const text = json(given);
    const input = text === undefined ? undefined : JSON.parse(text);
    this.#admissible(input?.now, true);
    this.#deadlineFits(input);
    let answer;
    try {
      answer = this.svc.handle(input);
    } catch (e) {
      // A core refusal is recorded with its advance's events — except `time_went_backwards`,
      // which changes nothing, not even time (as a binding's own refusals, errno 7xx and up,
      // change nothing): its line would have a `now` below the last, which the format
      // refuses.
      if (e && typeof e.code === 'string' && e.errno < 700 && e.code !== 'time_went_backwards') {
        this.#push({ now: input.now, input, error: e.code, events: e.events ?? [] });
      }
      throw e;
    }
    this.#push({ now: input.now, input, reply: answer.reply, events: answer.events });
    return answer;
  }

  /** Refuses an open or keep-alive whose deadline the recording could not write. */
  #deadlineFits(input) {
    const { kind, now } = input ?? {};
    if (typeof now !== 'number') return; // the service refuses it (bad_argument / out_of_range)
    let ttl;
    if (kind === 'open_session' || kind === 'open_labeled') ttl = input.ttl;
    else if (kind === 'keep_alive' && typeof input.session === 'number') ttl = this.svc.session(input.session)?.ttl;
    if (typeof ttl === 'number' && now + ttl > Number.MAX_SAFE_INTEGER) {
      throw new RangeError(`a recording holds numbers up to 2^53 - 1; this ${kind}'s deadline, ${now} + ${ttl}, is past it`);
    }
  }

  /**
   * Records one line, or stops the recorder if the line cannot be written (see handle): a
   * value JSON cannot hold, or a line over the reader's limits (an answer of many events).
   */
  #push(obj) {
    let text;
    try {
      text = line(obj);
    } catch (e) {
      this.#stop(e.message);
    }
    const fault = this.#overLimits(text);
    if (fault) this.#stop(`it ${fault}`);
    this.#add(text);
    this.last = Math.max(this.last, obj.now);
  }

  #stop(why) {
    this.broken = `line ${this.lines.length + 1} cannot be recorded (${why}); the service applied it, so the recording stops here`;
    throw new RangeError(this.broken);
  }

  #usable() {
    if (this.broken) throw new RangeError(this.broken);
  }

  /**
   * Records a storage decision: `gate.admit(resource, token)` at `now` (true = accepted).
   * A token that is not a whole number from 1 to 2^53 − 1 is a RangeError before the gate
   * sees it.
   */
  admit(gate, now, resource, token) {
    this.#usable();
    if (!Number.isSafeInteger(token) || token < 1) throw new RangeError(`a recording holds tokens from 1 to 2^53 - 1, not ${String(token)}`);
    if (!isU(now)) throw new RangeError(`a recording's now is a whole number from 0 to 2^53 - 1, not ${String(now)}`);
    json({ now, resource }); // a name JSON cannot hold is refused too
    this.#admissible(now, false);
    // The replay starts each resource's fence empty: a gate that already held a token for
    // it would answer differently from the replay's.
    if (!this.resources.has(resource) && typeof resource === 'string' && gate.highest(resource) != null) {
      throw new RangeError(`the gate already holds a token for ${JSON.stringify(resource)} from before the recording; a replay starts every resource's fence empty (admit through a fresh gate)`);
    }
    let ok = true;
    let highest = null;
    try {
      gate.admit(resource, token);
    } catch (e) {
      if (!e || e.code !== 'stale') throw e;
      ok = false;
      highest = e.highest;
    }
    this.resources.add(resource);
    this.#push({ now, admit: { resource, token }, result: ok ? 'accepted' : 'stale', ...(ok ? {} : { highest }) });
    return ok;
  }

  /** The recording: its lines, each ending in a newline. Cost: O(size). */
  text() {
    return `${[...this.lines, endLine(this.lines.length)].join('\n')}\n`;
  }
}

// ------------------------------------------------------------------ reading

/** A recording that cannot be replayed: `line` (1-based) and `reason`. */
export class RecordingError extends Error {
  constructor(lineNo, reason) {
    super(`line ${lineNo}: ${reason}`);
    this.name = 'RecordingError';
    this.line = lineNo;
    this.reason = reason;
  }
}

const isObj = (x) => x !== null && typeof x === 'object' && !Array.isArray(x);
const isU = (x) => Number.isSafeInteger(x) && x >= 0;

function only(obj, keys, n, what) {
  for (const k of Object.keys(obj)) if (!keys.includes(k)) throw new RecordingError(n, `${what} has an unknown field "${k}"`);
}

/**
 * The UTF-8 length of a JS string, without making the bytes: the limits are the format's,
 * in bytes, as the server's export counts them. A lone surrogate counts the 3 bytes of
 * U+FFFD, which TextEncoder writes for it.
 */
export function utf8Length(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/** Splits and checks the lines: sizes, checksums, JSON, shapes. Returns {header, entries}. */
export function parseRecording(text) {
  if (typeof text !== 'string') throw new RecordingError(0, 'not text');
  // A UTF-16 unit is at least one byte: the length alone refuses most oversized texts
  // before they are measured.
  if (text.length > LIMITS.bytes || utf8Length(text) > LIMITS.bytes) {
    throw new RecordingError(0, `the file is larger than ${LIMITS.bytes} bytes`);
  }
  const rows = text.split('\n');
  if (rows.at(-1) === '') rows.pop();
  if (!rows.length) throw new RecordingError(1, 'the file is empty');
  if (rows.length > LIMITS.lines) throw new RecordingError(LIMITS.lines + 1, `more than ${LIMITS.lines} lines`);
  const objs = rows.map((row, i) => {
    const n = i + 1;
    if (row.length > LIMITS.lineBytes || utf8Length(row) > LIMITS.lineBytes) {
      throw new RecordingError(n, `longer than ${LIMITS.lineBytes} bytes`);
    }
    const tab = row.lastIndexOf('\t');
    if (tab < 0) throw new RecordingError(n, 'no checksum (each line is JSON, a tab, and its CRC-32)');
    const body = row.slice(0, tab);
    const sum = row.slice(tab + 1).replace(/\r$/, '');
    if (!/^[0-9a-f]{8}$/.test(sum)) throw new RecordingError(n, `the checksum "${sum.slice(0, 12)}" is not 8 hex digits`);
    if (crc32(body) !== sum) throw new RecordingError(n, `checksum mismatch (the line says ${sum}, its text has ${crc32(body)}): the line was changed or damaged`);
    let obj;
    try {
      obj = JSON.parse(body);
    } catch (e) {
      throw new RecordingError(n, `not JSON (${e.message})`);
    }
    if (!isObj(obj)) throw new RecordingError(n, 'not a JSON object');
    return obj;
  });
  const header = objs[0];
  if (header.format !== FORMAT) throw new RecordingError(1, `not a fencelock recording (format is ${JSON.stringify(header.format)})`);
  if (!READS.includes(header.version)) throw new RecordingError(1, `version ${JSON.stringify(header.version)} is not supported (this page reads ${READS.join(' and ')})`);
  let body = objs.slice(1);
  if (header.version >= 2) {
    // The end line: the last, counting the lines before it. Without it, or with another
    // count, lines were lost (a file cut short at a line break) or added.
    const n = objs.length;
    const end = objs[n - 1];
    if (n < 2 || !('end' in end)) throw new RecordingError(n, 'the last line is not the end line {"end":{"lines":N}}: the recording was cut short');
    only(end, ['end'], n, 'the end line');
    if (!isObj(end.end) || end.end.lines !== n - 1) throw new RecordingError(n, `the end line counts ${say(isObj(end.end) ? end.end.lines : end.end)} lines before it, the file has ${n - 1}: lines were lost or added`);
    only(end.end, ['lines'], n, 'the end line');
    body = body.slice(0, -1);
  }
  only(header, ['format', 'version', 'source', 'tick_ms', 'capacity', 'config', 'snapshot'], 1, 'the header');
  if ('tick_ms' in header && !isTickMs(header.tick_ms)) throw new RecordingError(1, `"tick_ms" is ${say(header.tick_ms)}: it must be a whole number of milliseconds from 1 to ${MAX_TICK_MS} (how long one tick of "now" is)`);
  if (!isObj(header.capacity) || !['sessions', 'locks', 'claims'].every((k) => isU(header.capacity[k]))) throw new RecordingError(1, 'the header has no capacity {sessions, locks, claims}');
  // The page makes a core of this size: a few bytes must not ask for a gigabyte.
  for (const k of ['sessions', 'locks', 'claims']) {
    if (header.capacity[k] > LIMITS.rows) throw new RecordingError(1, `the header's capacity asks for ${header.capacity[k]} ${k}; a recording's core has at most ${LIMITS.rows} of each`);
  }
  if (!isObj(header.config)) throw new RecordingError(1, 'the header has no config');
  if (!unhex(header.snapshot)) throw new RecordingError(1, 'the header\'s snapshot is not hex');
  let last = 0;
  const tickMs = 'tick_ms' in header ? header.tick_ms : DEFAULT_TICK_MS;
  const entries = body.map((o, i) => {
    const n = i + 2;
    if ('end' in o) throw new RecordingError(n, header.version >= 2 ? 'an end line before the last line' : 'an end line in a recording of version 1, which has none');
    if (!isU(o.now)) throw new RecordingError(n, '"now" is not a non-negative integer');
    if (o.now < last) throw new RecordingError(n, `"now" goes back (${o.now} after ${last})`);
    // The page writes a time in milliseconds, exactly: past 2^53 - 1 ms it no longer could.
    if (o.now * tickMs > Number.MAX_SAFE_INTEGER) throw new RecordingError(n, `"now" is ${o.now} ticks of ${tickMs} ms, past 2^53 - 1 ms: the longest time this page shows exactly`);
    last = o.now;
    if ('admit' in o) {
      only(o, ['now', 'admit', 'result', 'highest'], n, 'a storage line');
      if (!isObj(o.admit) || typeof o.admit.resource !== 'string' || !isU(o.admit.token)) throw new RecordingError(n, 'admit needs {resource, token}');
      if (o.result !== 'accepted' && o.result !== 'stale') throw new RecordingError(n, 'result must be "accepted" or "stale"');
      return { line: n, kind: 'admit', ...o };
    }
    only(o, ['now', 'input', 'reply', 'error', 'events'], n, 'an input line');
    if (!isObj(o.input) || !INPUT_KINDS.has(o.input.kind)) throw new RecordingError(n, `unknown input ${JSON.stringify(o.input?.kind)}`);
    if (o.input.now !== o.now) throw new RecordingError(n, `the input's now (${o.input.now}) is not the line's (${o.now})`);
    // the token a release_hold names its hold by: a number the line can hold exactly, as "now"
    if (o.input.kind === 'release_hold' && !isU(o.input.token)) throw new RecordingError(n, `release_hold's "token" is ${say(o.input.token)}: it must be a whole number from 0 to 2^53 - 1`);
    if (('reply' in o) === ('error' in o)) throw new RecordingError(n, 'an input line has exactly one of "reply" and "error"');
    if (!Array.isArray(o.events)) throw new RecordingError(n, '"events" is not a list');
    return { line: n, kind: 'input', ...o };
  });
  const tickSaid = 'tick_ms' in header;
  return { header, entries, tickMs: tickSaid ? header.tick_ms : DEFAULT_TICK_MS, tickSaid };
}

/** Deep equality of JSON values (key order ignored). */
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => same(a[k], b[k]));
}

const say = (x) => (x === undefined ? 'nothing' : json(x));

/**
 * Opens the recording's start in a fresh core: `LockService.restore(snapshot, capacity)`,
 * checked against the header's config. Throws RecordingError naming line 1.
 */
export function startOf(api, header) {
  let svc;
  try {
    svc = api.LockService.restore(unhex(header.snapshot), header.capacity);
  } catch (e) {
    throw new RecordingError(1, `the core refuses the starting snapshot: ${e.code ?? ''} ${e.message}`);
  }
  const cfg = svc.config();
  for (const k of Object.keys(header.config)) {
    if (!same(cfg[k], header.config[k])) {
      svc.free?.();
      throw new RecordingError(1, `the snapshot's ${k} is ${say(cfg[k])}, the header says ${say(header.config[k])}`);
    }
  }
  return svc;
}

/**
 * Applies one entry to `svc` (and `gates`, resource → FenceGate) and checks the answer
 * against the recording. Returns {reply, events, error, admitted}; throws RecordingError.
 */
export function applyEntry(api, svc, gates, e) {
  if (e.kind === 'admit') {
    const { resource, token } = e.admit;
    let gate = gates.get(resource);
    if (!gate) {
      gate = new api.FenceGate(1); // one resource per gate: a row each, not more
      gates.set(resource, gate);
    }
    let result = 'accepted';
    let highest = null;
    try {
      gate.admit(resource, token);
    } catch (err) {
      if (!err || err.code !== 'stale') throw new RecordingError(e.line, `the fence refuses the write: ${err?.code ?? err}`);
      result = 'stale';
      highest = err.highest;
    }
    if (result !== e.result) throw new RecordingError(e.line, `the fence says ${result} for token ${token}${highest != null ? ` (highest ${highest})` : ''}, the recording says ${e.result}`);
    return { admitted: { resource, token, result, highest } };
  }
  let got;
  try {
    got = svc.handle(e.input);
  } catch (err) {
    if (!err || typeof err.code !== 'string') throw err;
    // A recording holds the core's refusals only: the binding's argument refusals
    // (`out_of_range` 701, `bad_argument` 702) mean the line is not an input the core
    // was given. Anything else the binding throws (out of memory) is not the file's fault.
    if (err.errno === 701 || err.errno === 702) throw new RecordingError(e.line, `the input is not one the core can be given: ${err.code} (${err.message})`);
    if (!(err.errno < 700)) throw err;
    if (!('error' in e)) throw new RecordingError(e.line, `the core refuses ${e.input.kind}: ${err.code} (${err.message}); the recording says it answered ${say(e.reply)}`);
    if (err.code !== e.error) throw new RecordingError(e.line, `the core refuses with ${err.code}, the recording says ${e.error}`);
    if (!same(err.events ?? [], e.events)) throw new RecordingError(e.line, `the refusal's events differ: the core gives ${say(err.events ?? [])}, the recording ${say(e.events)}`);
    return { error: err.code, events: err.events ?? [] };
  }
  if ('error' in e) throw new RecordingError(e.line, `the core answers ${say(got.reply)}, the recording says it refused with ${e.error}`);
  if (!same(got.reply, e.reply)) throw new RecordingError(e.line, `the core answers ${say(got.reply)}, the recording says ${say(e.reply)}`);
  if (!same(got.events, e.events)) throw new RecordingError(e.line, `the events differ: the core gives ${say(got.events)}, the recording ${say(e.events)}`);
  return got;
}

/**
 * Parses `text` and replays it all into a fresh core, checking every line. Returns the
 * parsed recording; throws RecordingError (line and reason) at the first problem.
 * Cost: O(lines × answer size); the cores it made are freed.
 */
export function verifyRecording(api, text) {
  const rec = parseRecording(text);
  const svc = startOf(api, rec.header);
  const gates = new Map();
  try {
    for (const e of rec.entries) applyEntry(api, svc, gates, e);
  } finally {
    svc.free?.();
    for (const g of gates.values()) g.free?.();
  }
  return rec;
}
