// fencelock/lite: the JS class over the small module's RawLite (wasm/lite/src/service.rs).
// It holds no lock rule: it gives each argument to the module as the number or string the
// module judges (anything else as a value the module refuses in its own order), and turns
// the module's numbers into the full module's event objects and error codes.
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

/** A lone surrogate: a string holding one has no UTF-8 form. */
const LONE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
/** Strings longer than this (UTF-16 units) are not copied into the module; the core is
 * given TOO_LONG instead, one byte over the longest name, and answers name_too_long in
 * its own order. (fencelock-wasm-args' STRING_COPY_LIMIT and TOO_LONG: the Rust test
 * `the_js_name_limits_are_the_bindings` holds these to them.) */
const COPY_LIMIT = 65536;
const TOO_LONG = 'x'.repeat(65);

/** A number argument as the module is to see it: a non-number becomes NaN, which the
 * module refuses as out_of_range (the wasm boundary would otherwise convert "5" to 5). */
const num = (x) => (typeof x === 'number' ? x : NaN);
/** An optional number: undefined and null are none. */
const opt = (x) => (x === undefined || x === null ? undefined : num(x));
/** A lock name: a string without a lone surrogate, else null (refused as bad_argument by
 * the module, after the arguments it checks first); one too long to copy, TOO_LONG. */
function lockName(s) {
  if (typeof s !== 'string') return null;
  if (s.length > COPY_LIMIT) return TOO_LONG;
  return (s.isWellFormed ? s.isWellFormed() : !LONE.test(s)) ? s : null;
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

/** Binds the class to one build of the module (its RawLite). */
export function bind({ RawLite }) {
  /**
   * The lock service, small: the core's sessions, FIFO waits, fencing tokens and
   * lock-delay, with numbers in and out. See wasm/README.md ("The small module").
   */
  class LiteService {
    #raw;
    /** The errno of the last refusal, 0 after an answer or once lastError() read it. */
    #errno = 0;

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

    #answer(code) {
      this.#errno = code < 0 ? -code : 0;
      return code;
    }

    openSession(now, ttl) {
      return this.#answer(this.#raw.openSession(num(now), num(ttl)));
    }

    keepAlive(now, session, request) {
      return this.#answer(this.#raw.keepAlive(num(now), num(session), opt(request)));
    }

    closeSession(now, session, request) {
      return this.#answer(this.#raw.closeSession(num(now), num(session), opt(request)));
    }

    acquire(now, session, lock, mode = 0, wait = 0, until, request, count, limit) {
      return this.#answer(this.#raw.acquire(num(now), num(session), lockName(lock), num(mode),
        num(wait), opt(until), opt(request), opt(count), opt(limit)));
    }

    release(now, session, lock, request) {
      return this.#answer(this.#raw.release(num(now), num(session), lockName(lock), opt(request)));
    }

    cancel(now, session, lock, request) {
      return this.#answer(this.#raw.cancel(num(now), num(session), lockName(lock), opt(request)));
    }

    tick(now) {
      return this.#answer(this.#raw.tick(num(now)));
    }

    pollTimeout() {
      const t = this.#raw.pollTimeout();
      return t < 0 ? null : t;
    }

    replyValue() {
      return this.#raw.value();
    }

    lastError() {
      const errno = this.#errno;
      this.#errno = 0;
      return errno === 0 ? null : failure(errno);
    }

    pendingEvents() {
      return this.#raw.pendingEvents();
    }

    eventLimit() {
      return this.#raw.eventLimit();
    }

    takeEvents() {
      const n = this.#raw.takeEvents();
      // The module keeps the events when it cannot hand them over (no memory for the list).
      if (n.length === 0 && this.#raw.pendingEvents() > 0) throw failure(703);
      const out = [];
      for (let i = 0, at = 0; at < n.length; i += 1, at += WIDTH) {
        const kind = EVENTS[n[at]] ?? 'unknown';
        const e = { kind, session: n[at + 1] };
        if (n[at + 2] === 1) e.lock = this.#raw.takenLock(i);
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
      this.#raw.free();
    }
  }
  return { LiteService };
}
