// Types of fencelock/lite (wasm/lite): the small module's LiteService, an ES module (node
// and the browser). Number arguments are JS numbers: `now`, a ttl and a lock-delay below
// 2^52, a permits' count and limit and maxNameLen at most 2^32 - 1, every other a safe
// non-negative integer; every number given back is a safe integer.

/** The capacities (rows) and config of a LiteService. */
export interface LiteConfig {
  sessions: number;
  locks: number;
  claims: number;
  /** Ticks a lock stays ungrantable after its holder's session expired (default 0). */
  lockDelay?: number;
  /** Longest lock name in bytes, 1..=64 (default 64). */
  maxNameLen?: number;
}

/**
 * A reply code: opened 0, kept_alive 1, closed 2, granted 3, queued 4, busy 5, released 6,
 * cancelled 7, hold_ended 8, wait_ended 9, ticked 10; refused: minus the errno.
 */
export type LiteCode = number;
/** 0 exclusive, 1 shared, 2 permits (count of limit). */
export type LiteMode = 0 | 1 | 2;
/** 0 none (busy if not free), 1 forever, 2 until the tick given. */
export type LiteWait = 0 | 1 | 2;

export type Mode = "exclusive" | "shared" | { permits: number; limit: number };
export type ReleaseReason = "released" | "closed" | "expired";
/** One event for the host to route to the session it names (the full module's Output). */
export type LiteEvent =
  | { kind: "granted"; session: number; lock: string; mode: Mode; token: number }
  | { kind: "released"; session: number; lock: string; token: number; reason: ReleaseReason }
  | { kind: "session_expired"; session: number }
  | { kind: "wait_timed_out"; session: number; lock: string };

/** The codes this module's refusals can have. */
export type LiteErrorCode =
  | "unknown_session" | "not_holder" | "not_queued" | "already_queued" | "mode_mismatch"
  | "stale_request" | "request_reused" | "limit_mismatch" | "empty_name" | "name_too_long"
  | "bad_ttl" | "time_went_backwards" | "bad_config" | "bad_permits" | "capacity_exceeded"
  | "buffer_too_small" | "out_of_range" | "bad_argument" | "out_of_memory";
/** A refusal: an Error (RangeError for out_of_range, TypeError for bad_argument). */
export interface LiteError extends Error {
  code: LiteErrorCode;
  /** The full module's .errno: the core's 1xx-3xx and 502, 701 out_of_range, 702 bad_argument, 703 out_of_memory. */
  errno: number;
  /** The constructor's bad_argument for a key it does not know: that key. */
  key?: string;
}

/**
 * The lock service, small: sessions, FIFO waits, fencing tokens, lock-delay, permits.
 * Every input takes the host's clock `now` first (advancing to it as `tick(now)` would)
 * and returns a LiteCode; a refusal changes nothing but that advance (none for
 * `time_went_backwards`, `buffer_too_small` and the argument errors), whose events stay
 * for takeEvents().
 * Every input can be refused with `time_went_backwards`, `buffer_too_small` (the events
 * kept might overflow eventLimit(): take them, call again) and `out_of_range`.
 */
export declare class LiteService {
  /**
   * Tables of the given rows (about 100 bytes a session, 150 a lock, 70 a claim).
   * Throws a LiteError: bad_argument (null, an array or not an object; a key it does not
   * know, in `.key`; reading it threw), out_of_range, bad_config, out_of_memory. The
   * values are all read before one is judged (the full module judges each as it reads it,
   * so a throwing getter can be bad_argument here where it would not be reached there).
   * Cost: O(sessions + locks + claims).
   */
  constructor(config: LiteConfig);
  /** 0 opened (replyValue: the session). Refused: bad_ttl, capacity_exceeded. Cost: O(log sessions). */
  openSession(now: number, ttl: number): LiteCode;
  /** 1 kept_alive (replyValue: the new deadline). Refused: unknown_session, stale_request, request_reused. Cost: O(1). */
  keepAlive(now: number, session: number, request?: number | null): LiteCode;
  /** 2 closed: holds released, waits ended (events). Refused: unknown_session, stale_request, request_reused. Cost: O(its claims). */
  closeSession(now: number, session: number, request?: number | null): LiteCode;
  /**
   * 3 granted (replyValue: the token), 4 queued (the position), 5 busy; for a retry of the
   * session's latest request, 8 hold_ended (the token) or 9 wait_ended. Refused, in the
   * core's order: unknown_session, empty_name, name_too_long, bad_permits, stale_request,
   * request_reused, limit_mismatch, already_queued, mode_mismatch, capacity_exceeded;
   * before the core, bad_argument (a lock that is not a well-formed string, a mode or wait
   * outside its codes). Cost: the core's acquire plus the name written into the service's name buffer.
   */
  acquire(
    now: number, session: number, lock: string, mode?: LiteMode, wait?: LiteWait,
    until?: number | null, request?: number | null, count?: number | null, limit?: number | null,
  ): LiteCode;
  /** 6 released (replyValue: the token held); the next waiters are granted (events). Refused: unknown_session, the name's errors, the request's, not_holder. Cost: the core's release plus the name written into the service's name buffer. */
  release(now: number, session: number, lock: string, request?: number | null): LiteCode;
  /** 7 cancelled. Refused: unknown_session, the name's errors, the request's, not_queued. Cost: as release. */
  cancel(now: number, session: number, lock: string, request?: number | null): LiteCode;
  /** 10 ticked (replyValue: now): expiries, timed-out waits, lock-delays ended (events). Cost: O(1) when nothing is due, O(log n) per thing due. */
  tick(now: number): LiteCode;
  /** The next tick something is due, or null. Cost: O(1). */
  pollTimeout(): number | null;
  /** The last answer's number: session, deadline, token, position or tick. Cost: O(1). */
  replyValue(): number;
  /** The last input's refusal (null if it was answered); forgotten once read. Cost: O(1). */
  lastError(): LiteError | null;
  /** How many events wait for takeEvents(). Cost: O(1). */
  pendingEvents(): number;
  /** The most events kept: twice the most one input can emit at capacity. Cost: O(1). */
  eventLimit(): number;
  /** The events since the last take, in order, and forgets them. Throws out_of_memory (the events kept) if the list cannot be made. Cost: O(events). */
  takeEvents(): LiteEvent[];
  /** Frees the module's memory for this service; every input or query after it throws, and so does a second free(). */
  free(): void;
  /** free(), for `using`: the service is freed at the end of its scope. */
  [Symbol.dispose](): void;
}

/** The browser build fetches and compiles its .wasm here; in node it does nothing. */
export default function init(
  input?: { module_or_path: RequestInfo | URL | Response | BufferSource | WebAssembly.Module } | RequestInfo | URL | Response | BufferSource | WebAssembly.Module,
): Promise<unknown>;
