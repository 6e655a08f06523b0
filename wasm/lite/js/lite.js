// fencelock/lite: the JS class over the small module's RawLite (wasm/lite/src/service.rs).
// It holds no lock rule: it gives each argument to the module as the number the module
// judges (a lock name written into the service's name buffer, its length passed; anything
// else as a value the module refuses in its own order), and turns the module's numbers
// into the full module's event objects and error codes.
// scripts/build-wasm.sh copies it beside each build of the module (web and node), where
// index.js (web) or index.mjs (node) binds it to that build.

/** errno → code: the core's `Error::code()` → `Error::kind()`, then the binding's own.
 * The Rust test `the_js_error_table_is_the_cores` checks it against the core. */
const CODES = {
  101: 'unknown_session', 102: 'not_holder', 103: 'not_queued', 104: 'already_queued',
  105: 'mode_mismatch', 106: 'stale_request', 107: 'request_reused', 108: 'limit_mismatch',
  109: 'not_watching', 110: 'already_watching', 201: 'empty_name', 202: 'name_too_long',
  203: 'bad_ttl', 204: 'deadline_overflow', 205: 'time_went_backwards', 206: 'bad_config',
  207: 'bad_permits', 208: 'label_too_long', 301: 'capacity_exceeded', 401: 'stale',
  402: 'zero_token', 501: 'bad_frame', 502: 'buffer_too_small', 503: 'bad_magic',
  504: 'unsupported_version', 505: 'corrupt_snapshot', 601: 'unknown_keep_alive',
  701: 'out_of_range', 702: 'bad_argument', 703: 'out_of_memory',
};

/** The event kinds of RawLite.takeEvents, in its order, then the reasons of a release. */
const EVENTS = ['granted', 'released', 'session_expired', 'wait_timed_out'];
const REASONS = ['released', 'closed', 'expired'];
const MODES = ['exclusive', 'shared'];
/** The keys of the constructor's config, in the order its values are read. */
const KEYS = ['sessions', 'locks', 'claims', 'lockDelay', 'maxNameLen'];
/** Numbers per event in RawLite.takeEvents (the crate's EVENT_WIDTH). */
const WIDTH = 8;

/** What the core is given for a well-formed string too long to be a name (over
 * NAME_UNITS), which is not copied: one byte over the longest name, so it answers
 * name_too_long in its own order. (fencelock-wasm-args' TOO_LONG: the Rust test
 * `the_js_name_limits_are_the_bindings` holds it to it.) */
const TOO_LONG = 'x'.repeat(65);

/** A number argument as the module is to see it: a non-number becomes NaN, which the
 * module refuses as out_of_range (the wasm boundary would otherwise convert "5" to 5). */
const num = (x) => (typeof x === 'number' ? x : NaN);
/** An optional number: undefined and null are none. */
const opt = (x) => (x === undefined || x === null ? undefined : num(x));
/** Names cross through a buffer each service owns in the module's memory: the class
 * writes the name's UTF-8 there (no allocation: an ASCII name copied unit by unit, any
 * other by TextEncoder.encodeInto) and passes its length. A string of at most NAME_UNITS UTF-16 units fits (NAME_ROOM bytes, the crate's
 * NAME_ROOM); a longer well-formed one cannot be a name, and the stand-in TOO_LONG is
 * written for it (the core answers name_too_long in its own order, as for the full
 * module); one with a lone surrogate is -1 (bad_argument), see lockName. */
const NAME_UNITS = 64;
const NAME_ROOM = 192;
const isWellFormed = String.prototype.isWellFormed;
const charCodeAt = String.prototype.charCodeAt;
const encoder = new TextEncoder();
const encodeInto = TextEncoder.prototype.encodeInto;
const call = Function.prototype.call.bind(Function.prototype.call);
const U8 = Uint8Array;
const bufferOf = Object.getOwnPropertyDescriptor(WebAssembly.Memory.prototype, 'buffer').get;
const byteLengthOf = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(U8.prototype), 'byteLength').get;

/** String.prototype.isWellFormed for an engine without it (Safari before 16.4): no lone
 * surrogate, a lead (D800–DBFF) not followed by a trail (DC00–DFFF) or a trail not after a
 * lead. A loop over the units with the built-in charCodeAt taken at load, so judging a
 * name runs no code of the caller's; not a regular expression, whose lookbehind those
 * engines cannot even parse (the module would not load). */
function wellFormed(s) {
  for (let i = 0; i < s.length; i++) {
    const u = call(charCodeAt, s, i);
    if (u >= 0xdc00 && u <= 0xdfff) return false;
    if (u >= 0xd800 && u <= 0xdbff) {
      const t = call(charCodeAt, s, i + 1); // NaN past the end
      if (!(t >= 0xdc00 && t <= 0xdfff)) return false;
      i++;
    }
  }
  return true;
}

/** A lock name as the module is to read it: the string, the stand-in TOO_LONG for one too
 * long to be a name, or null for a value that is not a string without a lone surrogate
 * (the module refuses it as bad_argument, after the arguments it checks first). */
function lockName(s) {
  if (typeof s !== 'string') return null;
  // Checked at any length (nothing is copied here): a lone surrogate is bad_argument in
  // every layer, before the module is called.
  const ok = isWellFormed !== undefined ? call(isWellFormed, s) : wellFormed(s);
  if (!ok) return null;
  return s.length > NAME_UNITS ? TOO_LONG : s;
}

/** The error for an errno: an Error (a RangeError for out_of_range, a TypeError for
 * bad_argument) with `.code` and `.errno`, as the full module throws. */
function failure(errno) {
  const code = CODES[errno] ?? `errno_${errno}`;
  const Kind = errno === 701 ? RangeError : errno === 702 ? TypeError : Error;
  const e = new Kind(code);
  e.code = code;
  e.errno = errno;
  return e;
}

/** Binds the class to one build of the module: its RawLite and its memory (the glue's
 * `wasmMemory`, which scripts/build-wasm.sh appends). */
export function bind({ RawLite, wasmMemory }) {
  /**
   * The lock service, small: the core's sessions, FIFO waits, fencing tokens and
   * lock-delay, with numbers in and out. See wasm/README.md ("The small module").
   */
  class LiteService {
    #raw;
    /** The errno of the last refusal, 0 after an answer or once lastError() read it. */
    #errno = 0;
    /** A view of the module's name buffer for this service, made again when the memory
     * has grown (a grown memory detaches the old view: its byteLength is 0). */
    #view = null;

    /**
     * A service of `sessions`, `locks` and `claims` rows, `lockDelay` ticks (default 0) and
     * names of at most `maxNameLen` bytes (default 64). Throws a LiteError: bad_argument
     * (null, an array or not an object; a key it does not know, named in `.key`; reading
     * it threw), out_of_range, bad_config, out_of_memory. Cost: O(sessions + locks +
     * claims).
     */
    constructor(config) {
      // As the full module: the kind of value, then its keys (a revoked proxy throws
      // on both), then the values, all read before the module judges them.
      let keys;
      let args;
      try {
        if (typeof config !== 'object' || config === null || Array.isArray(config)) {
          throw failure(702);
        }
        keys = Reflect.ownKeys(config);
      } catch {
        throw failure(702);
      }
      const unknown = keys.find((k) => typeof k === 'string' && !KEYS.includes(k));
      if (unknown !== undefined) {
        const e = failure(702);
        e.key = unknown;
        throw e;
      }
      try {
        args = KEYS.map((k) => config[k]);
      } catch {
        throw failure(702); // a getter threw
      }
      const [sessions, locks, claims, lockDelay, maxNameLen] = args;
      const raw = RawLite.create(num(sessions), num(locks), num(claims), opt(lockDelay),
        opt(maxNameLen));
      if (!raw) throw failure(RawLite.createErrno());
      this.#raw = raw;
    }

    /** Writes `lock`'s name into the name buffer and returns its length, or -1 for a value
     * the module refuses as bad_argument (and for a freed service, whose call throws).
     * The service is checked live right before the write, after everything that could
     * run other code; from there, only intrinsics taken when this module loaded run. */
    #put(lock) {
      if (typeof lock !== 'string') return -1;
      const raw = this.#raw;
      let view = this.#view;
      if (view === null || call(byteLengthOf, view) === 0) {
        if (raw.__wbg_ptr === 0) return -1;
        view = new U8(call(bufferOf, wasmMemory()), raw.nameBuffer(), NAME_ROOM);
        this.#view = view;
      }
      if (raw.__wbg_ptr === 0) return -1;
      // An ASCII name that fits (the common case) is copied unit by unit: it is its own
      // UTF-8 and has no surrogate, and the loop costs less than a call into the engine's
      // encoder. Any other is judged by lockName and written whole by the encoder.
      const n = lock.length;
      if (n <= NAME_UNITS) {
        let i = 0;
        for (; i < n; i++) {
          const c = call(charCodeAt, lock, i);
          if (c > 0x7f) break;
          view[i] = c;
        }
        if (i === n) return n;
      }
      const text = lockName(lock);
      if (text === null) return -1;
      return call(encodeInto, encoder, text, view).written;
    }

    /** The module's object, or a bad_argument error for a freed service: thrown here, in
     * JS, for a call into wasm on a freed object is refused from inside wasm, and each
     * such refusal leaked its stack space (the module is built to abort on panic) until
     * every service of the module trapped. */
    #live() {
      const raw = this.#raw;
      if (raw.__wbg_ptr === 0) {
        const e = failure(702);
        e.message = 'bad_argument: this LiteService was freed';
        throw e;
      }
      return raw;
    }

    #answer(code) {
      this.#errno = code < 0 ? -code : 0;
      return code;
    }

    openSession(now, ttl) {
      return this.#answer(this.#live().openSession(num(now), num(ttl)));
    }

    keepAlive(now, session, request) {
      return this.#answer(this.#live().keepAlive(num(now), num(session), opt(request)));
    }

    closeSession(now, session, request) {
      return this.#answer(this.#live().closeSession(num(now), num(session), opt(request)));
    }

    acquire(now, session, lock, mode = 0, wait = 0, until, request, count, limit) {
      const len = this.#put(lock);
      return this.#answer(this.#live().acquire(num(now), num(session), len, num(mode),
        num(wait), opt(until), opt(request), opt(count), opt(limit)));
    }

    release(now, session, lock, request) {
      const len = this.#put(lock);
      return this.#answer(this.#live().release(num(now), num(session), len, opt(request)));
    }

    cancel(now, session, lock, request) {
      const len = this.#put(lock);
      return this.#answer(this.#live().cancel(num(now), num(session), len, opt(request)));
    }

    tick(now) {
      return this.#answer(this.#live().tick(num(now)));
    }

    pollTimeout() {
      const t = this.#live().pollTimeout();
      return t < 0 ? null : t;
    }

    replyValue() {
      return this.#live().value();
    }

    lastError() {
      this.#live(); // a freed service's calls all throw, this one too
      const errno = this.#errno;
      this.#errno = 0;
      return errno === 0 ? null : failure(errno);
    }

    pendingEvents() {
      return this.#live().pendingEvents();
    }

    eventLimit() {
      return this.#live().eventLimit();
    }

    takeEvents() {
      const n = this.#live().takeEvents();
      // The module keeps the events when it cannot hand them over (no memory for the list).
      if (n.length === 0 && this.#live().pendingEvents() > 0) throw failure(703);
      const out = [];
      for (let i = 0, at = 0; at < n.length; i += 1, at += WIDTH) {
        const kind = EVENTS[n[at]] ?? 'unknown';
        const e = { kind, session: n[at + 1] };
        if (n[at + 2] === 1) e.lock = this.#live().takenLock(i);
        if (kind === 'granted') {
          const m = n[at + 4];
          e.mode = m === 2 ? { permits: n[at + 5], limit: n[at + 6] } : MODES[m];
        }
        if (kind === 'granted' || kind === 'released') e.token = n[at + 3];
        if (kind === 'released') e.reason = REASONS[n[at + 7]];
        out.push(e);
      }
      return out;
    }

    free() {
      this.#live().free();
    }
  }
  // `using` frees it at the end of its scope, as the full module's classes do.
  if (Symbol.dispose) LiteService.prototype[Symbol.dispose] = LiteService.prototype.free;
  return { LiteService };
}
