/*
 * Conformance runner. Usage: vectors FILE...   Exit status 1 on any mismatch.
 *
 * FILE.vec (the tests/vectors files): replays each `in` frame through the C ABI's frame entry
 * point (fencelock_service_handle_frame) and compares, byte for byte, the events it queued
 * (`out` lines, drained with fencelock_service_drain_frames; they come first, the advance's
 * first, and stand even when the input is refused), then exactly one `reply <hex>` (the
 * reply frame) or `err <code>` closing each `in`, every `snapshot`, and every `poll <tick>`
 * or `poll none` (fencelock_service_poll_timeout). The directive
 * `raise <floor>` (wasm/tests/vectors/determinism_watches.vec) calls
 * fencelock_service_raise_revision, closed by `revision <n>` (what it returned) or
 * `err <code>`.
 *
 * `--keyed` first: every service is keyed (fencelock_service_set_name_key) before its first
 * input; every byte must be the same.
 *
 * gate/FILE.vec (tests/vectors/gate): admits through fencelock_gate_admit and reads
 * fencelock_gate_highest, as `run_gate` below says.
 *
 * FILE.calls (tests/vectors/precedence.calls): runs each line through the TYPED functions
 * (fencelock_service_open_session, _acquire, …; not frames) and checks the expected reply
 * kind or error code:
 *   config sessions=N locks=N claims=N lock_delay=N max_name_len=N
 *   <method> key=value ... -> ok <reply kind>   |   -> err <code>
 * (methods open, open_labeled, keep_alive, close, acquire, release, release_hold (with
 * token=N), cancel, watch, unwatch, tick; mode x, s or p:<count>/<limit> through
 * fencelock_service_acquire_permits). A row
 * with request=0 cannot be made through the typed functions, which read 0 as "no request
 * number": the runner applies only the advance such a row makes (a tick to its now, what
 * a refused row leaves), as the Python runner does, and counts it.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fencelock.h"

static const char *file;
static long line_no;
static int failures, inputs, outputs, replies, snapshots, calls, raises, polls;

static void fail(const char *what) {
  failures++;
  fprintf(stderr, "%s:%ld: %s\n", file, line_no, what);
}

/* Decodes hex text into a malloc'd buffer; returns its length, or -1 if not hex. */
static long unhex(const char *text, uint8_t **out) {
  size_t n = strlen(text);
  *out = malloc(n / 2 + 1);
  if (n % 2) return -1;
  for (size_t i = 0; i < n / 2; i++) {
    unsigned v;
    if (sscanf(text + 2 * i, "%2x", &v) != 1) return -1;
    (*out)[i] = (uint8_t)v;
  }
  return (long)(n / 2);
}

static unsigned long field(const char *cfg, const char *key) {
  const char *p = strstr(cfg, key);
  if (!p) {
    fail("config lacks a field");
    return 0;
  }
  return strtoul(p + strlen(key), NULL, 10);
}

/* `--keyed`: every service's lock-name index is keyed (fencelock_service_set_name_key). */
static int keyed;

/* A new service from a `config` line; NULL (and a failure) if refused. `max_watchers=` is
 * optional (the core's default when absent, as in the files written before watches). */
static fencelock_service *configure(const char *text, fencelock_config *c) {
  fencelock_service *svc = NULL;
  c->capacity.sessions = (uint32_t)field(text, "sessions=");
  c->capacity.locks = (uint32_t)field(text, "locks=");
  c->capacity.claims = (uint32_t)field(text, "claims=");
  c->lock_delay = field(text, "lock_delay=");
  c->max_name_len = (uint32_t)field(text, "max_name_len=");
  const char *mw = strstr(text, "max_watchers=");
  c->max_watchers = mw ? (uint32_t)strtoul(mw + strlen("max_watchers="), NULL, 10)
                       : FENCELOCK_DEFAULT_MAX_WATCHERS;
  if (fencelock_service_new(c, &svc) != FENCELOCK_RESULT_OK) fail("config refused");
  if (keyed) {
    /* A fixed key stands in for a random one: any key must give the same bytes. */
    uint8_t key[FENCELOCK_NAME_KEY_LEN];
    for (size_t i = 0; i < sizeof key; i++) key[i] = (uint8_t)(0x9e + 37 * i);
    if (fencelock_service_set_name_key(svc, key, sizeof key) != FENCELOCK_RESULT_OK)
      fail("name key refused");
  }
  return svc;
}

/* The reply kinds' names, as the core's Reply::kind() spells them, by kind number. */
static const char *const REPLY_KINDS[] = {
    "none",     "opened",   "kept_alive", "closed",     "granted",    "queued",   "busy",
    "released", "cancelled", "hold_ended", "wait_ended", "ticked",     "watching", "unwatched"};

static const char *reply_kind(fencelock_reply_kind k) {
  return (size_t)k < sizeof REPLY_KINDS / sizeof REPLY_KINDS[0] ? REPLY_KINDS[k] : "?";
}

/* ------------------------------------------------------------------------- .vec */

/* What the last `in` produced, consumed by the `out` / `reply` / `err` lines after it. */
static struct {
  int active, closed, raise;
  fencelock_result code;
  uint64_t revision;
  uint8_t reply[FENCELOCK_MAX_FRAME_LEN];
  size_t reply_len;
  uint8_t *events;
  size_t len, pos;
} last;

static void settle(void) {
  if (!last.active) return;
  if (!last.closed) fail("an `in` without its `reply` or `err` line");
  if (last.pos != last.len) fail("the input queued more events than the vector lists");
  last.active = 0;
}

/* The `out` lines must all precede the closing line and match every queued event. */
static void close_input(void) {
  if (!last.active) {
    fail("reply/err without an in");
    return;
  }
  if (last.closed) fail("a second reply/err for one in");
  if (last.pos != last.len) fail("the input queued an event the vector does not list");
  last.closed = 1;
}

static void run_vec(FILE *f) {
  fencelock_service *svc = NULL;
  uint8_t *buf = NULL;
  size_t cap = 0;
  char *text = NULL;
  size_t text_cap = 0;
  ssize_t n;
  line_no = 0;
  memset(&last, 0, sizeof last);
  while ((n = getline(&text, &text_cap, f)) >= 0) {
    line_no++;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) text[--n] = 0;
    if (n == 0 || text[0] == '#') continue;
    if (strncmp(text, "config ", 7) == 0) {
      settle();
      fencelock_service_free(svc);
      fencelock_config c;
      svc = configure(text, &c);
      /* Room for the most events one input can emit (grown before each input to the
       * service's max_events, which watches raise). */
      cap = ((size_t)c.capacity.sessions + 2 * (size_t)c.capacity.claims) *
            (FENCELOCK_FRAME_PREFIX_LEN + FENCELOCK_MAX_FRAME_LEN);
      free(buf);
      buf = malloc(cap ? cap : 1);
    } else if (strncmp(text, "in", 2) == 0 && (text[2] == ' ' || text[2] == 0)) {
      settle();
      uint8_t *frame = NULL;
      long len = unhex(text[2] ? text + 3 : "", &frame);
      if (len < 0 || !svc) {
        fail(svc ? "bad hex" : "in before config");
        free(frame);
        continue;
      }
      /* The bound of this input's events, read before it: the buffer must hold them. */
      size_t most = 0;
      if (fencelock_service_max_events(svc, &most) != FENCELOCK_RESULT_OK) fail("max_events");
      if (most * (FENCELOCK_FRAME_PREFIX_LEN + FENCELOCK_MAX_FRAME_LEN) > cap) {
        cap = most * (FENCELOCK_FRAME_PREFIX_LEN + FENCELOCK_MAX_FRAME_LEN);
        free(buf);
        buf = malloc(cap);
      }
      /* A non-NULL pointer even for the empty frame, so the empty frame is what is judged. */
      fencelock_reply reply;
      last.code = fencelock_service_handle_frame(svc, frame, (size_t)len, &reply, last.reply,
                                                 sizeof last.reply, &last.reply_len);
      if (last.code != FENCELOCK_RESULT_OK &&
          (reply.kind != FENCELOCK_REPLY_KIND_NONE || last.reply_len != 0))
        fail("a refused input left a reply");
      size_t written = 0;
      if (fencelock_service_drain_frames(svc, buf, cap, &written) != FENCELOCK_RESULT_OK)
        fail("the events do not fit the bound of one input");
      last.active = 1;
      last.closed = 0;
      last.raise = 0;
      last.events = buf;
      last.len = written;
      last.pos = 0;
      inputs++;
      free(frame);
    } else if (strncmp(text, "raise ", 6) == 0) {
      settle();
      char *end = NULL;
      uint64_t floor = strtoull(text + 6, &end, 10);
      if (!svc || end == text + 6 || *end) {
        fail(svc ? "raise needs a decimal floor" : "raise before config");
        continue;
      }
      last.code = fencelock_service_raise_revision(svc, floor, &last.revision);
      last.active = 1;
      last.closed = 0;
      last.raise = 1;
      last.len = last.pos = 0;
      raises++;
    } else if (strncmp(text, "revision ", 9) == 0) {
      close_input();
      uint64_t want = strtoull(text + 9, NULL, 10);
      if (!last.raise) {
        fail("a revision line closing an in");
      } else if (last.code != FENCELOCK_RESULT_OK) {
        char m[120];
        snprintf(m, sizeof m, "raise refused with %u, vector expects revision %llu",
                 (unsigned)last.code, (unsigned long long)want);
        fail(m);
      } else if (last.revision != want) {
        fail("revision differs");
      }
    } else if (strncmp(text, "out ", 4) == 0) {
      uint8_t *want = NULL;
      long len = unhex(text + 4, &want);
      outputs++;
      if (!last.active || last.closed) {
        fail("an out line after the reply/err of its in (or with no in)");
      } else if (last.pos + 2 > last.len) {
        fail("vector expects an event the input did not queue");
      } else {
        size_t flen = last.events[last.pos] | (size_t)last.events[last.pos + 1] << 8;
        if ((long)flen != len || last.pos + 2 + flen > last.len ||
            memcmp(last.events + last.pos + 2, want, flen) != 0)
          fail("event frame differs");
        last.pos += 2 + flen;
      }
      free(want);
    } else if (strncmp(text, "reply ", 6) == 0) {
      uint8_t *want = NULL;
      long len = unhex(text + 6, &want);
      replies++;
      close_input();
      if (last.raise) {
        fail("a reply line closing a raise");
      } else if (last.code != FENCELOCK_RESULT_OK) {
        char m[160];
        fencelock_result_message(last.code, m, sizeof m, NULL);
        char w[240];
        snprintf(w, sizeof w, "input refused with %u (%s), vector expects a reply",
                 (unsigned)last.code, m);
        fail(w);
      } else if ((long)last.reply_len != len || memcmp(last.reply, want, last.reply_len) != 0) {
        fail("reply frame differs");
      }
      free(want);
    } else if (strncmp(text, "err ", 4) == 0) {
      unsigned long code = strtoul(text + 4, NULL, 10);
      close_input();
      if ((unsigned long)last.code != code) {
        char m[200];
        snprintf(m, sizeof m, "result %u, vector expects err %lu", (unsigned)last.code, code);
        fail(m);
      }
    } else if (strncmp(text, "snapshot ", 9) == 0) {
      settle();
      uint8_t *want = NULL;
      long len = unhex(text + 9, &want);
      size_t need = 0, got = 0;
      snapshots++;
      if (!svc || fencelock_service_snapshot_len(svc, &need) != FENCELOCK_RESULT_OK) {
        fail("no service to snapshot");
      } else {
        uint8_t *snap = malloc(need + 1);
        if (fencelock_service_snapshot(svc, snap, need, &got) != FENCELOCK_RESULT_OK ||
            (long)got != len || memcmp(snap, want, got) != 0)
          fail("snapshot bytes differ");
        free(snap);
      }
      free(want);
    } else if (strncmp(text, "poll ", 5) == 0) {
      settle();
      bool due = false;
      uint64_t at = 0;
      char got[24];
      if (!svc || fencelock_service_poll_timeout(svc, &due, &at) != FENCELOCK_RESULT_OK) {
        fail("no service to poll");
      } else {
        if (due) snprintf(got, sizeof got, "%llu", (unsigned long long)at);
        else snprintf(got, sizeof got, "none");
        if (strcmp(got, text + 5) != 0) fail("poll_timeout differs");
      }
      polls++;
    } else {
      fail("unknown directive");
    }
  }
  settle();
  free(text);
  free(buf);
  fencelock_service_free(svc);
}

/* ----------------------------------------------------------------------- .calls */

/* The value of `key=` among the words of `args` (up to " ->"), or NULL. The value ends at
 * the next space; *len gets its length. */
static const char *arg(const char *args, const char *key, size_t *len) {
  size_t k = strlen(key);
  for (const char *p = args; *p && strncmp(p, "->", 2) != 0;) {
    const char *end = strchr(p, ' ');
    if (!end) end = p + strlen(p);
    if ((size_t)(end - p) > k && strncmp(p, key, k) == 0 && p[k] == '=') {
      *len = (size_t)(end - p) - k - 1;
      return p + k + 1;
    }
    p = *end ? end + 1 : end;
  }
  return NULL;
}

static int number(const char *args, const char *key, uint64_t *v) {
  size_t len = 0;
  const char *p = arg(args, key, &len);
  if (!p || len == 0) return 0;
  char *end = NULL;
  *v = strtoull(p, &end, 10);
  return end == p + len;
}

/* Rows with request=0, which this ABI's typed functions cannot express (0 is "no request
 * number" there): only their advance is applied; reported in the summary line. */
static int request_zero;

/* request=-|N: 0 ("no request number") for `-`; *zero set for request=0. */
static int request_arg(const char *args, uint64_t *v, int *zero) {
  size_t len = 0;
  const char *p = arg(args, "request", &len);
  *v = 0;
  *zero = 0;
  if (!p || (len == 1 && *p == '-')) return 1;
  if (!number(args, "request", v)) return 0;
  *zero = *v == 0;
  return 1;
}

static void run_call(fencelock_service *svc, char *text) {
  char *arrow = strstr(text, " -> ");
  if (!arrow) {
    fail("a call line without ` -> `");
    return;
  }
  char want_kind[32] = "";
  unsigned long want_code = 0;
  int want_ok = 0;
  if (sscanf(arrow + 4, "ok %31s", want_kind) == 1) {
    want_ok = 1;
  } else if (sscanf(arrow + 4, "err %lu", &want_code) != 1) {
    fail("expected `ok <kind>` or `err <code>` after ->");
    return;
  }
  char method[32] = "";
  if (sscanf(text, "%31s", method) != 1) {
    fail("no method");
    return;
  }
  const char *args = text + strlen(method);
  while (*args == ' ') args++;
  uint64_t now = 0, ttl = 0, session = 0, request = 0, until = 0;
  if (!number(args, "now", &now)) {
    fail("a call without now=");
    return;
  }
  int zero = 0;
  if (!request_arg(args, &request, &zero)) {
    fail("request= must be - or a number");
    return;
  }
  if (zero) {
    /* Not expressible here: apply what any refused row leaves, the advance to its now. */
    fencelock_result t = fencelock_service_tick(svc, now);
    if (t != FENCELOCK_RESULT_OK && t != FENCELOCK_RESULT_TIME_WENT_BACKWARDS)
      fail("the advance of a request=0 row was refused");
    fencelock_output o;
    while (fencelock_service_poll_output(svc, &o) == FENCELOCK_RESULT_OK) {
    }
    request_zero++; /* reported on its own line, not counted as a replayed call */
    return;
  }
  size_t lock_len = 0, mode_len = 0, wait_len = 0, label_len = 0;
  const char *lock = arg(args, "lock", &lock_len);
  const char *mode_s = arg(args, "mode", &mode_len);
  const char *wait_s = arg(args, "wait", &wait_len);
  const char *label = arg(args, "label", &label_len);
  uint32_t mode = FENCELOCK_MODE_EXCLUSIVE, wait = FENCELOCK_WAIT_NONE;
  unsigned count = 0, limit = 0;
  int permits = 0, used = 0;
  if (mode_s && mode_len == 1 && *mode_s == 's') {
    mode = FENCELOCK_MODE_SHARED;
  } else if (mode_s && mode_len > 2 && strncmp(mode_s, "p:", 2) == 0 &&
             sscanf(mode_s + 2, "%u/%u%n", &count, &limit, &used) == 2 &&
             (size_t)used == mode_len - 2) {
    permits = 1;
  } else if (mode_s && !(mode_len == 1 && *mode_s == 'x')) {
    fail("mode= must be x, s or p:<count>/<limit>");
  }
  if (wait_s && wait_len == 7 && strncmp(wait_s, "forever", 7) == 0) {
    wait = FENCELOCK_WAIT_FOREVER;
  } else if (wait_s && wait_len > 6 && strncmp(wait_s, "until:", 6) == 0) {
    wait = FENCELOCK_WAIT_UNTIL;
    until = strtoull(wait_s + 6, NULL, 10);
  } else if (wait_s && !(wait_len == 4 && strncmp(wait_s, "none", 4) == 0)) {
    fail("wait= must be none, forever or until:N");
  }
  int has_session = number(args, "session", &session);
  /* The name's bytes, NUL-free and space-free; a non-NULL pointer even when empty. */
  static const uint8_t empty = 0;
  const uint8_t *name = lock && lock_len ? (const uint8_t *)lock : &empty;
  fencelock_reply reply;
  memset(&reply, 0xa5, sizeof reply);
  fencelock_result got;
  calls++;
  if (strcmp(method, "open") == 0) {
    number(args, "ttl", &ttl);
    got = fencelock_service_open_session(svc, now, ttl, &reply);
  } else if (strcmp(method, "open_labeled") == 0) {
    number(args, "ttl", &ttl);
    if (!label) {
      fail("open_labeled without label=");
      return;
    }
    /* A non-NULL pointer even for the empty label, which is no label. */
    static const uint8_t none = 0;
    got = fencelock_service_open_labeled(svc, now, ttl,
                                         label_len ? (const uint8_t *)label : &none, label_len,
                                         &reply);
  } else if (strcmp(method, "tick") == 0) {
    got = fencelock_service_tick(svc, now);
    /* The typed tick has no reply; its frame's reply is TICKED (as the core's handle). */
    memset(&reply, 0, sizeof reply);
    if (got == FENCELOCK_RESULT_OK) {
      reply.kind = FENCELOCK_REPLY_KIND_TICKED;
      reply.now = now;
    }
  } else if (!has_session) {
    fail("a session input without session=");
    return;
  } else if (strcmp(method, "keep_alive") == 0) {
    got = fencelock_service_keep_alive(svc, now, session, request, &reply);
  } else if (strcmp(method, "close") == 0) {
    got = fencelock_service_close_session(svc, now, session, request, &reply);
  } else if (!lock) {
    fail("a lock input without lock=");
    return;
  } else if (strcmp(method, "acquire") == 0 && permits) {
    got = fencelock_service_acquire_permits(svc, now, session, name, lock_len, count, limit,
                                            wait, until, request, &reply);
  } else if (strcmp(method, "acquire") == 0) {
    got = fencelock_service_acquire(svc, now, session, name, lock_len, mode, wait, until,
                                    request, &reply);
  } else if (strcmp(method, "watch") == 0) {
    got = fencelock_service_watch(svc, now, session, name, lock_len, request, &reply);
  } else if (strcmp(method, "unwatch") == 0) {
    got = fencelock_service_unwatch(svc, now, session, name, lock_len, request, &reply);
  } else if (strcmp(method, "release") == 0) {
    got = fencelock_service_release(svc, now, session, name, lock_len, request, &reply);
  } else if (strcmp(method, "release_hold") == 0) {
    uint64_t token = 0;
    if (!number(args, "token", &token)) {
      fail("release_hold without token=");
      return;
    }
    got = fencelock_service_release_hold(svc, now, session, name, lock_len, token, request,
                                         &reply);
  } else if (strcmp(method, "cancel") == 0) {
    got = fencelock_service_cancel(svc, now, session, name, lock_len, request, &reply);
  } else {
    fail("unknown method");
    return;
  }
  /* Events are the .vec files' concern; they must not pile up here. */
  fencelock_output o;
  while (fencelock_service_poll_output(svc, &o) == FENCELOCK_RESULT_OK) {
  }
  char m[300];
  if (want_ok && got != FENCELOCK_RESULT_OK) {
    char why[160];
    fencelock_service_last_error(svc, why, sizeof why, NULL);
    snprintf(m, sizeof m, "refused with %u (%s), expected ok %s", (unsigned)got, why, want_kind);
    fail(m);
  } else if (want_ok && strcmp(reply_kind(reply.kind), want_kind) != 0) {
    snprintf(m, sizeof m, "replied %s, expected %s", reply_kind(reply.kind), want_kind);
    fail(m);
  } else if (!want_ok && (unsigned long)got != want_code) {
    snprintf(m, sizeof m, "result %u (reply %s), expected err %lu", (unsigned)got,
             reply_kind(reply.kind), want_code);
    fail(m);
  } else if (!want_ok && reply.kind != FENCELOCK_REPLY_KIND_NONE) {
    fail("a refused call left a reply");
  }
}

static void run_calls(FILE *f) {
  fencelock_service *svc = NULL;
  char *text = NULL;
  size_t text_cap = 0;
  ssize_t n;
  line_no = 0;
  while ((n = getline(&text, &text_cap, f)) >= 0) {
    line_no++;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) text[--n] = 0;
    if (n == 0 || text[0] == '#') continue;
    if (strncmp(text, "config ", 7) == 0) {
      fencelock_service_free(svc);
      fencelock_config c;
      svc = configure(text, &c);
    } else if (!svc) {
      fail("a call before the config line");
    } else {
      run_call(svc, text);
    }
  }
  free(text);
  fencelock_service_free(svc);
}

/* ------------------------------------------------------------- the gate vectors */

/* The gate vectors (tests/vectors/gate): what every fence answers, through the C gate.
 *   config resources=N        a new gate (fencelock_gate_new; --keyed: with a name key)
 *   in <hex>                  fencelock_gate_admit of the frame's (name, token)
 *   err <code> [highest=N]    the admit's refusal; a STALE one names the highest seen,
 *                             which fencelock_gate_highest must give
 *   highest <hex name> <N>    fencelock_gate_highest (0: never admitted)
 * An `in` with no `err` line after it was admitted. */
static int gate_admits, gate_refusals, gate_highest;

/* An admit frame, postcard (name: str, token: u64): a one-byte length (the files' names
 * are at most 65 bytes), the name, a varint. 0 when it is one. */
static int admit_frame(const uint8_t *b, size_t n, size_t *name_len, uint64_t *token) {
  if (n < 1 || b[0] >= 0x80 || (size_t)b[0] + 1 > n) return -1;
  uint64_t v = 0;
  size_t i = 1 + (size_t)b[0];
  for (int shift = 0;; shift += 7) {
    if (i >= n || shift > 63) return -1;
    uint8_t x = b[i++];
    v |= (uint64_t)(x & 0x7f) << shift;
    if (!(x & 0x80)) break;
  }
  if (i != n) return -1;
  *name_len = b[0];
  *token = v;
  return 0;
}

/* Whether `path` is a gate vector: a file in a directory named `gate`. */
static int in_gate_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return 0;
  size_t dir = (size_t)(slash - path);
  return dir >= 4 && strncmp(slash - 4, "gate", 4) == 0 && (dir == 4 || slash[-5] == '/');
}

static void run_gate(FILE *f) {
  fencelock_gate *gate = NULL;
  char *text = NULL;
  size_t cap = 0;
  /* The latest admit's refusal (and its name, for a STALE's highest), until `err`. */
  fencelock_result pending = FENCELOCK_RESULT_OK;
  uint8_t *name = NULL;
  size_t name_len = 0;
  line_no = 0;
  while (getline(&text, &cap, f) != -1) {
    line_no++;
    text[strcspn(text, "\r\n")] = 0;
    if (!text[0] || text[0] == '#') continue;
    char *rest = strchr(text, ' ');
    if (rest) *rest++ = 0;
    else rest = text + strlen(text);
    if (strcmp(text, "err") != 0 && pending != FENCELOCK_RESULT_OK) {
      fail("an admit was refused and no err line says so");
      pending = FENCELOCK_RESULT_OK;
    }
    if (strcmp(text, "config") == 0) {
      fencelock_gate_free(gate);
      gate = NULL;
      unsigned long n = strncmp(rest, "resources=", 10) == 0 ? strtoul(rest + 10, NULL, 10) : 0;
      if (n == 0 || fencelock_gate_new(n, &gate) != FENCELOCK_RESULT_OK) {
        fail("bad config line, or the gate refused it");
        break;
      }
      if (keyed) {
        uint8_t key[FENCELOCK_NAME_KEY_LEN];
        for (size_t i = 0; i < sizeof key; i++) key[i] = (uint8_t)(0x9e + 37 * i);
        if (fencelock_gate_set_name_key(gate, key, sizeof key) != FENCELOCK_RESULT_OK)
          fail("name key refused");
      }
    } else if (!gate) {
      fail("a line before the config line");
      break;
    } else if (strcmp(text, "in") == 0) {
      uint8_t *frame = NULL;
      long n = unhex(rest, &frame);
      uint64_t token = 0;
      if (n < 0 || admit_frame(frame, (size_t)n, &name_len, &token) != 0) {
        fail("bad admit frame");
        free(frame);
        continue;
      }
      free(name);
      name = malloc(name_len + 1);
      memcpy(name, frame + 1, name_len);
      free(frame);
      pending = fencelock_gate_admit(gate, name, name_len, token);
      gate_admits++;
    } else if (strcmp(text, "err") == 0) {
      char *end = NULL;
      unsigned long code = strtoul(rest, &end, 10);
      if (pending == FENCELOCK_RESULT_OK) fail("expected a refusal, the admit was admitted");
      else if ((unsigned long)pending != code) fail("another refusal");
      const char *h = strstr(end, "highest=");
      if (h && pending == FENCELOCK_RESULT_STALE) {
        bool seen = false;
        uint64_t highest = 0;
        if (fencelock_gate_highest(gate, name, name_len, &seen, &highest) != FENCELOCK_RESULT_OK ||
            !seen || highest != strtoull(h + 8, NULL, 10))
          fail("a stale admit's highest differs");
      } else if (h || pending == FENCELOCK_RESULT_STALE) {
        fail("a stale refusal names its highest, no other does");
      }
      pending = FENCELOCK_RESULT_OK;
      gate_refusals++;
    } else if (strcmp(text, "highest") == 0) {
      char *space = strrchr(rest, ' ');
      if (!space) {
        fail("expected `highest HEX N`");
        continue;
      }
      *space = 0;
      uint8_t *r = NULL;
      long n = unhex(rest, &r);
      bool seen = false;
      uint64_t highest = 0;
      if (n < 0 || fencelock_gate_highest(gate, r, (size_t)n, &seen, &highest) != FENCELOCK_RESULT_OK)
        fail("highest refused");
      else if ((seen ? highest : 0) != strtoull(space + 1, NULL, 10) || (!seen && highest != 0))
        fail("another highest token");
      free(r);
      gate_highest++;
    } else {
      fail("an unknown directive");
    }
  }
  if (pending != FENCELOCK_RESULT_OK) fail("an admit was refused and no err line says so");
  free(name);
  free(text);
  fencelock_gate_free(gate);
}

static int ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && strcmp(s + a - b, tail) == 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s [--keyed] FILE.vec|FILE.calls...\n", argv[0]);
    return 2;
  }
  int first = 1;
  if (strcmp(argv[1], "--keyed") == 0) {
    keyed = 1;
    first = 2;
  }
  for (int i = first; i < argc; i++) {
    file = argv[i];
    FILE *f = fopen(file, "r");
    if (!f) {
      perror(file);
      failures++;
      continue;
    }
    if (ends_with(file, ".calls")) run_calls(f);
    else if (in_gate_dir(file)) run_gate(f);
    else run_vec(f);
    fclose(f);
  }
  printf("vectors.c%s: %d files, %d inputs, %d events, %d replies, %d snapshots, %d polls, "
         "%d revision raises, %d typed calls replayed, %d failed\n",
         keyed ? " (keyed)" : "", argc - first, inputs, outputs, replies, snapshots, polls, raises,
         calls, failures);
  if (gate_admits || gate_refusals || gate_highest)
    printf("vectors.c%s: gate files: %d admits, %d refusals, %d highest\n", keyed ? " (keyed)" : "",
           gate_admits, gate_refusals, gate_highest);
  if (request_zero)
    printf("vectors.c: %d typed calls had request=0, which the typed functions cannot make "
           "(0 is \"no request number\" there): only their advance was applied\n",
           request_zero);
  return failures ? 1 : 0;
}
