// Types of fencelock/lite (wasm/lite): the small module's LiteService. Numbers are JS
// numbers: a tick, ttl or lock-delay below 2^52, anything else a safe non-negative
// integer; every number given back is then a safe integer.

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

export type LiteErrorCode =
  | "unknown_session" | "not_holder" | "not_queued" | "already_queued" | "mode_mismatch"
  | "stale_request" | "request_reused" | "limit_mismatch" | "empty_name" | "name_too_long"
  | "bad_ttl" | "deadline_overflow" | "time_went_backwards" | "bad_config" | "bad_permits"
  | "capacity_exceeded" | "buffer_too_small" | "out_of_range" | "bad_argument"
  | "out_of_memory";
/** A refusal: an Error (RangeError for out_of_range, TypeError for bad_argument). */
export interface LiteError extends Error {
  code: LiteErrorCode;
  /** The full module's .errno: the core's 1xx-5xx, 701 out_of_range, 702 bad_argument, 703 out_of_memory. */
  errno: number;
  /** The constructor's bad_argument for a key it does not know: that key. */
  key?: string;
}

/** The lock service, small: sessions, FIFO waits, fencing tokens, lock-delay. */
export declare class LiteService {
  /** Throws a LiteError: bad_argument, out_of_range, bad_config, out_of_memory. */
  constructor(config: LiteConfig);
  openSession(now: number, ttl: number): LiteCode;
  keepAlive(now: number, session: number, request?: number | null): LiteCode;
  closeSession(now: number, session: number, request?: number | null): LiteCode;
  acquire(
    now: number, session: number, lock: string, mode?: LiteMode, wait?: LiteWait,
    until?: number | null, request?: number | null, count?: number | null, limit?: number | null,
  ): LiteCode;
  release(now: number, session: number, lock: string, request?: number | null): LiteCode;
  cancel(now: number, session: number, lock: string, request?: number | null): LiteCode;
  tick(now: number): LiteCode;
  /** The next tick something is due, or null. */
  pollTimeout(): number | null;
  /** The last answer's number: session, deadline, token, position or tick. */
  replyValue(): number;
  /** The last input's refusal (null if it was answered); forgotten once read. */
  lastError(): LiteError | null;
  pendingEvents(): number;
  eventLimit(): number;
  takeEvents(): LiteEvent[];
  /** Frees the module's memory for this service; it is unusable after. */
  free(): void;
}

/** The browser build fetches and compiles its .wasm here; in node it does nothing. */
export default function init(
  input?: { module_or_path: RequestInfo | URL | Response | BufferSource | WebAssembly.Module } | RequestInfo | URL | Response | BufferSource | WebAssembly.Module,
): Promise<unknown>;
