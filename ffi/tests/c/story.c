/*
 * The GC-pause timeline through the C ABI, every reply and event asserted, then every kind
 * of bad input: each must give its code and change nothing (a refused input: nothing
 * beyond the advance to its now). Built twice by scripts/test-ffi.sh (static and shared
 * library) and run under valgrind.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fencelock.h"

static int checks, failures;

#define CHECK(cond)                                                        \
  do {                                                                     \
    checks++;                                                              \
    if (!(cond)) {                                                         \
      failures++;                                                          \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                      \
  } while (0)

/* Asserts a result code, printing both codes' messages on a mismatch. */
#define EXPECT(call, want)                                                  \
  do {                                                                      \
    fencelock_result got_ = (call);                                         \
    checks++;                                                               \
    if (got_ != (fencelock_result)(want)) {                                 \
      char m_[128];                                                         \
      fencelock_result_message(got_, m_, sizeof m_, NULL);                  \
      failures++;                                                           \
      fprintf(stderr, "%s:%d: %s returned %u (%s), want %u\n", __FILE__,    \
              __LINE__, #call, (unsigned)got_, m_, (unsigned)(want));       \
    }                                                                       \
  } while (0)

#define OK(call) EXPECT(call, FENCELOCK_RESULT_OK)
#define S(str) (const uint8_t *)(str), strlen(str)

/* The reply of the last input (every input writes one). */
static fencelock_reply r;

/* Drains every queued event into outs (at most max); returns how many. */
static size_t drain(fencelock_service *svc, fencelock_output *outs, size_t max) {
  size_t n = 0;
  fencelock_output o;
  memset(&o, 0xA5, sizeof o); /* a poll that fails without writing must not read as DONE */
  while (fencelock_service_poll_output(svc, &o) == FENCELOCK_RESULT_OK) {
    if (n < max) outs[n] = o;
    n++;
  }
  CHECK(o.kind == FENCELOCK_OUTPUT_KIND_NONE);
  return n;
}

static int is_event(const fencelock_output *o, fencelock_output_kind kind, uint64_t session,
                    const char *lock, uint64_t token) {
  if (o->kind != kind || o->session != session) return 0;
  if (lock && (o->lock_len != strlen(lock) || strcmp(o->lock, lock) != 0)) return 0;
  if (!lock && o->lock_len != 0) return 0;
  return o->token == token;
}

/* True when the reply is of this kind with this token (0 for kinds without one). */
static int is_reply(fencelock_reply_kind kind, uint64_t token) {
  return r.kind == kind && r.token == token;
}

static int no_reply(void) {
  return r.kind == FENCELOCK_REPLY_KIND_NONE && r.mode == FENCELOCK_MODE_NONE && r.token == 0 &&
         r.session == 0 && r.expires_at == 0 && r.position == 0 && r.now == 0 &&
         r.pending == 0 && r.count == 0 && r.limit == 0 && r.holders == 0;
}

/* The service's snapshot in a malloc'd buffer (*len bytes). */
static uint8_t *snapshot(fencelock_service *svc, size_t *len) {
  size_t need = 0;
  OK(fencelock_service_snapshot_len(svc, &need));
  uint8_t *buf = malloc(need ? need : 1);
  OK(fencelock_service_snapshot(svc, buf, need, len));
  CHECK(*len == need);
  return buf;
}

/* True when the service's snapshot still equals before[..len]. */
static int unchanged(fencelock_service *svc, const uint8_t *before, size_t len) {
  size_t now_len = 0;
  uint8_t *now = snapshot(svc, &now_len);
  int same = now_len == len && memcmp(now, before, len) == 0;
  free(now);
  return same;
}

static fencelock_config config(uint32_t sessions, uint32_t locks, uint32_t claims) {
  fencelock_config c = {{sessions, locks, claims}, 0, FENCELOCK_MAX_NAME_LEN,
                        FENCELOCK_DEFAULT_MAX_WATCHERS};
  return c;
}

static uint64_t open_session(fencelock_service *svc, uint64_t now, uint64_t ttl) {
  OK(fencelock_service_open_session(svc, now, ttl, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_OPENED && r.expires_at == now + ttl);
  return r.session;
}

/* ------------------------------------------------------------ the GC-pause timeline */

static void gc_pause_timeline(void) {
  fencelock_config cfg = config(8, 8, 16);
  fencelock_service *svc = NULL;
  fencelock_output outs[80];
  OK(fencelock_service_new(&cfg, &svc));
  CHECK(svc != NULL);

  /* Burn 33 tokens on another lock so A's grant is token 34, as in Martin Kleppmann's
   * "How to do distributed locking". The caller's answers are replies: nothing is
   * queued. */
  uint64_t warm = open_session(svc, 0, 1000);
  for (uint64_t i = 1; i <= 33; i++) {
    OK(fencelock_service_acquire(svc, 0, warm, S("warmup"), FENCELOCK_MODE_EXCLUSIVE,
                                 FENCELOCK_WAIT_NONE, 0, 0, &r));
    CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, i) && r.mode == FENCELOCK_MODE_EXCLUSIVE);
    OK(fencelock_service_release(svc, 0, warm, S("warmup"), 0, &r));
    CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, i));
  }
  OK(fencelock_service_close_session(svc, 0, warm, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_CLOSED, 0));
  CHECK(drain(svc, outs, 80) == 0);

  /* t0 = 0: A and B open sessions (ttl 10 s); A acquires and gets token 34. */
  uint64_t a = open_session(svc, 0, 10);
  uint64_t b = open_session(svc, 0, 10);
  CHECK(a == 2 && b == 3);
  OK(fencelock_service_acquire(svc, 0, a, S("jobs/reindex"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_NONE, 0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 34));

  /* B waits in the queue. */
  OK(fencelock_service_acquire(svc, 0, b, S("jobs/reindex"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_FOREVER, 0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_QUEUED, 0) && r.position == 1);

  /* t1: A enters a 25 s pause; B's keep-alives arrive at 3, 6 and 9 and are applied as
   * they arrive, with no tick in between: each carries its own now. */
  for (uint64_t t = 3; t <= 9; t += 3) {
    OK(fencelock_service_keep_alive(svc, t, b, 0, &r));
    CHECK(is_reply(FENCELOCK_REPLY_KIND_KEPT_ALIVE, 0) && r.expires_at == t + 10);
    CHECK(drain(svc, outs, 80) == 0);
  }
  bool scheduled = false;
  uint64_t at = 0;
  OK(fencelock_service_poll_timeout(svc, &scheduled, &at));
  CHECK(scheduled && at == 10); /* A's deadline */

  /* t2 = 10: A missed its keep-alives and expires; t3: B is granted 35. */
  OK(fencelock_service_tick(svc, 10));
  CHECK(drain(svc, outs, 80) == 3);
  CHECK(is_event(&outs[0], FENCELOCK_OUTPUT_KIND_SESSION_EXPIRED, a, NULL, 0));
  CHECK(is_event(&outs[1], FENCELOCK_OUTPUT_KIND_RELEASED, a, "jobs/reindex", 34));
  CHECK(outs[1].reason == FENCELOCK_RELEASE_REASON_EXPIRED);
  CHECK(is_event(&outs[2], FENCELOCK_OUTPUT_KIND_GRANTED, b, "jobs/reindex", 35));
  CHECK(outs[2].mode == FENCELOCK_MODE_EXCLUSIVE);

  /* The service's view now. */
  fencelock_holder holders[4];
  size_t count = 0;
  OK(fencelock_service_holders(svc, S("jobs/reindex"), holders, 4, &count));
  CHECK(count == 1 && holders[0].session == b && holders[0].token == 35 &&
        holders[0].mode == FENCELOCK_MODE_EXCLUSIVE);
  OK(fencelock_service_waiters(svc, S("jobs/reindex"), NULL, 0, &count));
  CHECK(count == 0);
  uint64_t rev = 0, now = 0;
  OK(fencelock_service_revision(svc, &rev));
  OK(fencelock_service_now(svc, &now));
  CHECK(rev == 35 && now == 10);
  fencelock_session_info info;
  EXPECT(fencelock_service_session(svc, a, &info), FENCELOCK_RESULT_UNKNOWN_SESSION);
  OK(fencelock_service_session(svc, b, &info));
  CHECK(info.id == b && info.ttl == 10 && info.expires_at == 19 && info.holds == 1 &&
        info.waits == 0 && info.watches == 0);
  uint64_t ids[8];
  OK(fencelock_service_sessions(svc, ids, 8, &count));
  CHECK(count == 1 && ids[0] == b);
  fencelock_name names[8];
  OK(fencelock_service_locks(svc, names, 8, &count));
  CHECK(count == 1 && names[0].len == 12 && strcmp(names[0].name, "jobs/reindex") == 0);
  OK(fencelock_service_poll_timeout(svc, &scheduled, &at));
  CHECK(scheduled && at == 19);

  /* B writes with 35; at t4 = 26 A resumes and writes with 34: the gate refuses it. */
  fencelock_gate *gate = NULL;
  OK(fencelock_gate_new(4, &gate));
  OK(fencelock_gate_admit(gate, S("storage"), 35));
  EXPECT(fencelock_gate_admit(gate, S("storage"), 34), FENCELOCK_RESULT_STALE);
  char msg[128];
  OK(fencelock_gate_last_error(gate, msg, sizeof msg, NULL));
  /* The core's text, with the numbers of this refusal. */
  CHECK(strncmp(msg, "stale", 5) == 0 && strstr(msg, "34") && strstr(msg, "35"));
  bool seen = false;
  uint64_t highest = 0;
  OK(fencelock_gate_highest(gate, S("storage"), &seen, &highest));
  CHECK(seen && highest == 35);

  /* A gate whose resource names others choose takes a secret key (from a random source
   * in real use): a key of another length is refused, and keying changes no answer. */
  static const uint8_t key[FENCELOCK_NAME_KEY_LEN] = {7, 1, 8, 2, 8, 1, 8, 2,
                                                      8, 4, 5, 9, 0, 4, 5, 2};
  bool keyed = true;
  EXPECT(fencelock_gate_set_name_key(gate, key, sizeof key - 1),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_gate_set_name_key(gate, NULL, sizeof key), FENCELOCK_RESULT_NULL_PARAMETER);
  OK(fencelock_gate_is_name_keyed(gate, &keyed));
  CHECK(!keyed);
  OK(fencelock_gate_set_name_key(gate, key, sizeof key));
  OK(fencelock_gate_is_name_keyed(gate, &keyed));
  CHECK(keyed);
  EXPECT(fencelock_gate_admit(gate, S("storage"), 34), FENCELOCK_RESULT_STALE);
  OK(fencelock_gate_highest(gate, S("storage"), &seen, &highest));
  CHECK(seen && highest == 35);

  /* A's keeper would have told it to stop before any of this (ttl 10, margin 2). */
  fencelock_keeper *keeper = NULL;
  bool extended = false, may = false;
  fencelock_lease lease;
  OK(fencelock_keeper_new(10, 3, 2, &keeper));
  OK(fencelock_keeper_keep_alive_sent(keeper, 0));
  OK(fencelock_keeper_keep_alive_acked(keeper, 0, &extended));
  CHECK(extended);
  OK(fencelock_keeper_may_act(keeper, 1, &may));
  CHECK(may);
  OK(fencelock_keeper_lease(keeper, 8, &lease));
  CHECK(lease.state == FENCELOCK_LEASE_STATE_JEOPARDY && lease.expires_at == 10);
  OK(fencelock_keeper_lease(keeper, 26, &lease));
  CHECK(lease.state == FENCELOCK_LEASE_STATE_EXPIRED);
  OK(fencelock_keeper_may_act(keeper, 26, &may));
  CHECK(!may);

  /* Snapshot and restore: the restored service has the same bytes and carries on. */
  size_t len = 0;
  uint8_t *snap = snapshot(svc, &len);
  fencelock_capacity cap = {8, 8, 16};
  fencelock_service *back = NULL;
  OK(fencelock_service_restore(&cap, snap, len, &back));
  CHECK(back != NULL && unchanged(back, snap, len));
  /* Keyed after the restore (a key is not in snapshots): nothing observable changes. */
  EXPECT(fencelock_service_set_name_key(back, key, sizeof key + 1),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  OK(fencelock_service_is_name_keyed(back, &keyed));
  CHECK(!keyed);
  OK(fencelock_service_set_name_key(back, key, sizeof key));
  OK(fencelock_service_is_name_keyed(back, &keyed));
  CHECK(keyed && unchanged(back, snap, len));
  OK(fencelock_service_release(back, 10, b, S("jobs/reindex"), 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 35));
  CHECK(drain(back, outs, 80) == 0);
  CHECK(unchanged(svc, snap, len)); /* the original is untouched */

  /* Restored keyed from the start (bytes whose names or session ids others chose): a key
   * of another length or NULL is refused and nothing is created; then the same service. */
  fencelock_service *keyed_back = NULL;
  EXPECT(fencelock_service_restore_keyed(&cap, snap, len, key, sizeof key - 1, &keyed_back),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_service_restore_keyed(&cap, snap, len, NULL, sizeof key, &keyed_back),
         FENCELOCK_RESULT_NULL_PARAMETER);
  CHECK(keyed_back == NULL);
  /* The arguments in their order: the key (4th, 5th) before the out-pointer (6th). */
  EXPECT(fencelock_service_restore_keyed(&cap, snap, len, key, sizeof key - 1, NULL),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  /* The key is judged before the bytes: junk with a bad key is the key's refusal. */
  EXPECT(fencelock_service_restore_keyed(&cap, snap, 3, key, sizeof key - 1, &keyed_back),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_service_restore_keyed(&cap, snap, 3, key, sizeof key, &keyed_back),
         FENCELOCK_RESULT_BAD_MAGIC);
  CHECK(keyed_back == NULL);
  OK(fencelock_service_restore_keyed(&cap, snap, len, key, sizeof key, &keyed_back));
  OK(fencelock_service_is_name_keyed(keyed_back, &keyed));
  CHECK(keyed && unchanged(keyed_back, snap, len));
  OK(fencelock_service_release(keyed_back, 10, b, S("jobs/reindex"), 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 35));
  fencelock_service_free(keyed_back);

  /* The gate's snapshot round-trips too. */
  size_t glen = 0;
  EXPECT(fencelock_gate_snapshot(gate, NULL, 0, &glen), FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  uint8_t gsnap[64];
  CHECK(glen > 0 && glen <= sizeof gsnap);
  OK(fencelock_gate_snapshot(gate, gsnap, sizeof gsnap, &glen));
  fencelock_gate *gate2 = NULL;
  OK(fencelock_gate_restore(4, gsnap, glen, &gate2));
  EXPECT(fencelock_gate_admit(gate2, S("storage"), 34), FENCELOCK_RESULT_STALE);
  OK(fencelock_gate_entries(gate2, names, 8, &count));
  CHECK(count == 1 && names[0].highest == 35 && strcmp(names[0].name, "storage") == 0);
  fencelock_gate *gate3 = NULL;
  EXPECT(fencelock_gate_restore_keyed(4, gsnap, glen, key, sizeof key + 1, &gate3),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_gate_restore_keyed(4, gsnap, glen, NULL, sizeof key, &gate3),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_gate_restore_keyed(4, gsnap, glen, key, sizeof key + 1, NULL),
         FENCELOCK_RESULT_INVALID_ARGUMENT); /* the key before the out-pointer */
  EXPECT(fencelock_gate_restore_keyed(4, gsnap, 3, key, sizeof key - 1, &gate3),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_gate_restore_keyed(4, gsnap, 3, key, sizeof key, &gate3),
         FENCELOCK_RESULT_BAD_MAGIC);
  CHECK(gate3 == NULL);
  OK(fencelock_gate_restore_keyed(4, gsnap, glen, key, sizeof key, &gate3));
  OK(fencelock_gate_is_name_keyed(gate3, &keyed));
  CHECK(keyed);
  EXPECT(fencelock_gate_admit(gate3, S("storage"), 34), FENCELOCK_RESULT_STALE);
  OK(fencelock_gate_highest(gate3, S("storage"), &seen, &highest));
  CHECK(seen && highest == 35);
  fencelock_gate_free(gate3);

  free(snap);
  fencelock_service_free(back);
  fencelock_service_free(svc);
  fencelock_gate_free(gate);
  fencelock_gate_free(gate2);
  fencelock_keeper_free(keeper);
}

/* ------------------------------------- a refused input: the advance to its now stands */

static void refused_after_the_advance(void) {
  fencelock_config cfg = config(4, 4, 8);
  fencelock_service *svc = NULL, *twin = NULL;
  fencelock_output outs[8], twin_outs[8];
  OK(fencelock_service_new(&cfg, &svc));
  OK(fencelock_service_new(&cfg, &twin));
  fencelock_service *both[2] = {svc, twin};
  for (int i = 0; i < 2; i++) {
    uint64_t a = open_session(both[i], 0, 5), b = open_session(both[i], 0, 100);
    OK(fencelock_service_acquire(both[i], 0, a, S("l"), FENCELOCK_MODE_EXCLUSIVE,
                                 FENCELOCK_WAIT_NONE, 0, 0, &r));
    OK(fencelock_service_acquire(both[i], 0, b, S("l"), FENCELOCK_MODE_EXCLUSIVE,
                                 FENCELOCK_WAIT_FOREVER, 0, 0, &r));
  }
  /* At 7, session 1 (A) asks to release: the advance to 7 expires A (at 5) and grants
   * B, then the release is refused (A is unknown now). The advance stands. */
  EXPECT(fencelock_service_release(svc, 7, 1, S("l"), 0, &r), FENCELOCK_RESULT_UNKNOWN_SESSION);
  CHECK(no_reply());
  OK(fencelock_service_tick(twin, 7));
  CHECK(drain(svc, outs, 8) == 3 && drain(twin, twin_outs, 8) == 3);
  CHECK(is_event(&outs[0], FENCELOCK_OUTPUT_KIND_SESSION_EXPIRED, 1, NULL, 0));
  CHECK(is_event(&outs[1], FENCELOCK_OUTPUT_KIND_RELEASED, 1, "l", 1));
  CHECK(is_event(&outs[2], FENCELOCK_OUTPUT_KIND_GRANTED, 2, "l", 2));
  size_t len = 0;
  uint8_t *snap = snapshot(twin, &len);
  CHECK(unchanged(svc, snap, len)); /* the same state as a plain tick to 7 */
  /* Several faults: the core's order decides (unknown session before an empty name). */
  EXPECT(fencelock_service_acquire(svc, 7, 9, (const uint8_t *)"", 0, FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_UNKNOWN_SESSION);
  /* Earlier than the service's time: refused first, nothing changes at all. */
  EXPECT(fencelock_service_acquire(svc, 6, 9, (const uint8_t *)"", 0, FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_TIME_WENT_BACKWARDS);
  char msg[128];
  OK(fencelock_service_last_error(svc, msg, sizeof msg, NULL));
  CHECK(strncmp(msg, "time went backwards", 19) == 0 && strstr(msg, "7") && strstr(msg, "6"));
  CHECK(unchanged(svc, snap, len));
  free(snap);
  fencelock_service_free(svc);
  fencelock_service_free(twin);
}

/* ------------------------------------------ frames: in, reply out, events drained */

static void frames(void) {
  fencelock_config cfg = config(4, 4, 8);
  fencelock_service *svc = NULL;
  uint8_t reply[FENCELOCK_MAX_FRAME_LEN], out[512];
  size_t n = 99;
  OK(fencelock_service_new(&cfg, &svc));
  /* Input::OpenSession { now: 0, ttl: 10 } = variant 0, varints 0 and 10. */
  const uint8_t open[] = {0x00, 0x00, 0x0a};
  OK(fencelock_service_handle_frame(svc, open, sizeof open, &r, reply, sizeof reply, &n));
  /* Reply::Opened { session: 1, expires_at: 10 } = [0, 1, 10]. */
  const uint8_t want_open[] = {0x00, 0x01, 0x0a};
  CHECK(n == sizeof want_open && memcmp(reply, want_open, n) == 0);
  CHECK(r.kind == FENCELOCK_REPLY_KIND_OPENED && r.session == 1 && r.expires_at == 10);

  /* Input::Acquire { now 0, session 1, "a", Exclusive, Wait::None, request None }. */
  const uint8_t acquire[] = {0x03, 0x00, 0x01, 0x01, 'a', 0x00, 0x00, 0x00};
  OK(fencelock_service_handle_frame(svc, acquire, sizeof acquire, &r, reply, sizeof reply, &n));
  /* Reply::Granted { Exclusive, token 1 } = [3, 0, 1]. */
  const uint8_t want_grant[] = {0x03, 0x00, 0x01};
  CHECK(n == sizeof want_grant && memcmp(reply, want_grant, n) == 0);
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1));
  /* A reply buffer too small for any reply: refused before anything is applied. */
  EXPECT(fencelock_service_handle_frame(svc, open, sizeof open, &r, reply, 3, &n),
         FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(n == FENCELOCK_MAX_FRAME_LEN && no_reply());
  uint64_t next = 0;
  size_t sessions = 0;
  OK(fencelock_service_sessions(svc, &next, 1, &sessions));
  CHECK(sessions == 1); /* not applied */
  /* No reply frame wanted: the struct only. */
  const uint8_t open2[] = {0x00, 0x02, 0x0a}; /* now 2, ttl 10 */
  OK(fencelock_service_handle_frame(svc, open2, sizeof open2, &r, NULL, 0, NULL));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_OPENED && r.session == 2 && r.expires_at == 12);

  /* Session 2 waits for "a"; session 1 closes (a frame): CLOSED, and the events queued. */
  const uint8_t wait2[] = {0x03, 0x02, 0x02, 0x01, 'a', 0x00, 0x02, 0x00};
  OK(fencelock_service_handle_frame(svc, wait2, sizeof wait2, &r, reply, sizeof reply, &n));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_QUEUED && r.position == 1);
  const uint8_t close1[] = {0x02, 0x02, 0x01, 0x00}; /* CloseSession { now 2, session 1 } */
  OK(fencelock_service_handle_frame(svc, close1, sizeof close1, &r, reply, sizeof reply, &n));
  CHECK(n == 1 && reply[0] == 0x02 && r.kind == FENCELOCK_REPLY_KIND_CLOSED);
  size_t pending = 0;
  OK(fencelock_service_pending(svc, &pending));
  CHECK(pending == 2);
  /* Released { 1, "a", token 1, Closed } then Granted { 2, "a", Exclusive, token 2 }. */
  const uint8_t want_events[] = {0x06, 0x00, 0x01, 0x01, 0x01, 'a', 0x01, 0x01,
                                 0x06, 0x00, 0x00, 0x02, 0x01, 'a', 0x00, 0x02};
  EXPECT(fencelock_service_drain_frames(svc, out, 7, &n), FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(n == sizeof want_events);
  OK(fencelock_service_drain_frames(svc, out, sizeof out, &n));
  CHECK(n == sizeof want_events && memcmp(out, want_events, n) == 0);
  OK(fencelock_service_drain_frames(svc, out, sizeof out, &n));
  CHECK(n == 0);

  /* Garbage frames: refused, nothing written, nothing changed. */
  size_t slen = 0;
  uint8_t *before = snapshot(svc, &slen);
  const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  const uint8_t trailing[] = {0x00, 0x02, 0x0a, 0x00};
  const uint8_t long_name[] = {0x03, 0x02, 0x01, 0x41}; /* claims a 65-byte name, truncated */
  n = 99;
  EXPECT(fencelock_service_handle_frame(svc, garbage, sizeof garbage, &r, reply, sizeof reply, &n),
         FENCELOCK_RESULT_BAD_FRAME);
  CHECK(n == 0 && no_reply());
  EXPECT(fencelock_service_handle_frame(svc, trailing, sizeof trailing, &r, reply, sizeof reply,
                                        &n),
         FENCELOCK_RESULT_BAD_FRAME);
  EXPECT(fencelock_service_handle_frame(svc, long_name, sizeof long_name, &r, reply,
                                        sizeof reply, &n),
         FENCELOCK_RESULT_BAD_FRAME);
  EXPECT(fencelock_service_handle_frame(svc, open, 0, &r, reply, sizeof reply, &n),
         FENCELOCK_RESULT_BAD_FRAME);
  for (size_t cut = 0; cut < sizeof acquire; cut++)
    EXPECT(fencelock_service_handle_frame(svc, acquire, cut, &r, reply, sizeof reply, &n),
           FENCELOCK_RESULT_BAD_FRAME);
  /* A well-formed frame the service refuses: keep-alive of session 9 at now 2. */
  const uint8_t keep9[] = {0x01, 0x02, 0x09, 0x00};
  EXPECT(fencelock_service_handle_frame(svc, keep9, sizeof keep9, &r, reply, sizeof reply, &n),
         FENCELOCK_RESULT_UNKNOWN_SESSION);
  CHECK(n == 0 && no_reply());
  EXPECT(fencelock_service_handle_frame(svc, NULL, 2, &r, reply, sizeof reply, &n),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_handle_frame(svc, open2, sizeof open2, &r, NULL, 10, &n),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_handle_frame(svc, open2, sizeof open2, NULL, reply, sizeof reply, &n),
         FENCELOCK_RESULT_NULL_PARAMETER);
  CHECK(unchanged(svc, before, slen));
  free(before);

  /* One buffer for the request and the reply (the input is copied first). */
  uint8_t io[FENCELOCK_MAX_FRAME_LEN + 1] = {0x00, 0x03, 0x0a};
  OK(fencelock_service_handle_frame(svc, io, 3, &r, io, sizeof io, &n));
  const uint8_t want_open3[] = {0x00, 0x03, 0x0d};
  CHECK(n == sizeof want_open3 && memcmp(io, want_open3, n) == 0);
  /* Longer than any input frame: refused unread. */
  EXPECT(fencelock_service_handle_frame(svc, io, sizeof io, &r, io, sizeof io, &n),
         FENCELOCK_RESULT_BAD_FRAME);
  CHECK(n == 0);
  fencelock_service_free(svc);
}

/* ------------------------------------------------------------------ bad input */

static void bad_input(void) {
  fencelock_config cfg = config(2, 2, 2);
  cfg.max_name_len = 8;
  fencelock_service *svc = NULL;
  fencelock_output o, outs[8];
  OK(fencelock_service_new(&cfg, &svc));
  uint64_t s = open_session(svc, 0, 5);
  OK(fencelock_service_acquire(svc, 0, s, S("held"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_NONE, 0, 1, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1));
  size_t slen = 0;
  uint8_t *before = snapshot(svc, &slen);

  /* NULL handles and NULL required pointers. */
  EXPECT(fencelock_service_new(NULL, &svc), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_new(&cfg, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_open_session(NULL, 0, 5, &r), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_open_session(svc, 0, 5, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_tick(NULL, 1), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_acquire(svc, 0, s, NULL, 4, FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_NULL_PARAMETER);
  CHECK(no_reply());
  EXPECT(fencelock_service_poll_output(NULL, &o), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_poll_output(svc, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_now(svc, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_snapshot(svc, NULL, 10, &slen), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_holders(svc, S("held"), NULL, 4, &slen),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_sessions(svc, NULL, 0, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_gate_admit(NULL, S("r"), 1), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_keeper_keep_alive_sent(NULL, 1), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_restore(NULL, before, slen, &svc), FENCELOCK_RESULT_NULL_PARAMETER);
  fencelock_service_free(NULL);
  fencelock_gate_free(NULL);
  fencelock_keeper_free(NULL);

  /* Names: empty, too long for the service (8), too long for any build, not UTF-8. */
  const uint8_t bad_utf8[] = {'h', 0xc3, 0x28};
  char huge[1000];
  memset(huge, 'x', sizeof huge);
  EXPECT(fencelock_service_acquire(svc, 0, s, (const uint8_t *)"", 0, FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_EMPTY_NAME);
  CHECK(no_reply());
  EXPECT(fencelock_service_acquire(svc, 0, s, S("ninebytes"), FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_NAME_TOO_LONG);
  char msg[128];
  size_t mlen = 0;
  OK(fencelock_service_last_error(svc, msg, sizeof msg, &mlen));
  CHECK(strcmp(msg, "name too long: 9 bytes, at most 8") == 0 && mlen == strlen(msg));
  EXPECT(fencelock_service_acquire(svc, 0, s, (const uint8_t *)huge, sizeof huge,
                                   FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_NAME_TOO_LONG);
  EXPECT(fencelock_service_release(svc, 0, s, bad_utf8, sizeof bad_utf8, 0, &r),
         FENCELOCK_RESULT_INVALID_UTF8);
  EXPECT(fencelock_service_holders(svc, bad_utf8, sizeof bad_utf8, NULL, 0, &slen),
         FENCELOCK_RESULT_INVALID_UTF8);
  EXPECT(fencelock_service_cancel(svc, 0, s, S("held"), 0, &r), FENCELOCK_RESULT_NOT_QUEUED);
  EXPECT(fencelock_service_release(svc, 0, s, S("free"), 0, &r), FENCELOCK_RESULT_NOT_HOLDER);

  /* Enum arguments outside their enums; the session and ttl rules. */
  EXPECT(fencelock_service_acquire(svc, 0, s, S("x"), 0, FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_service_acquire(svc, 0, s, S("x"), 7, FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_service_acquire(svc, 0, s, S("x"), FENCELOCK_MODE_SHARED, 9, 0, 0, &r),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_service_acquire(svc, 0, s, S("held"), FENCELOCK_MODE_SHARED,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_MODE_MISMATCH);
  EXPECT(fencelock_service_acquire(svc, 0, 42, S("x"), FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_UNKNOWN_SESSION);
  EXPECT(fencelock_service_acquire(svc, 0, 42, S("ninebytes"), FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_UNKNOWN_SESSION); /* the core's order: the session first */
  CHECK(unchanged(svc, before, slen)); /* none of those refusals changed anything */
  OK(fencelock_service_keep_alive(svc, 1, s, 0, &r)); /* and the handle still works */
  CHECK(is_reply(FENCELOCK_REPLY_KIND_KEPT_ALIVE, 0) && r.expires_at == 6);
  CHECK(drain(svc, outs, 8) == 0);
  free(before);
  before = snapshot(svc, &slen);
  EXPECT(fencelock_service_open_session(svc, 1, 0, &r), FENCELOCK_RESULT_BAD_TTL);
  EXPECT(fencelock_service_open_session(svc, 1, UINT64_MAX, &r),
         FENCELOCK_RESULT_DEADLINE_OVERFLOW);
  CHECK(unchanged(svc, before, slen));
  /* Idempotent retries: request 1 was the acquire. */
  EXPECT(fencelock_service_release(svc, 1, s, S("held"), 1, &r), FENCELOCK_RESULT_REQUEST_REUSED);
  OK(fencelock_service_acquire(svc, 1, s, S("held"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_NONE, 0, 1, &r)); /* the recorded reply again */
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1));
  CHECK(unchanged(svc, before, slen));
  uint64_t other = open_session(svc, 1, 5);
  CHECK(other == 2);
  EXPECT(fencelock_service_open_session(svc, 1, 5, &r), FENCELOCK_RESULT_CAPACITY_EXCEEDED);
  OK(fencelock_service_tick(svc, 3));
  CHECK(drain(svc, outs, 8) == 0);
  free(before);
  before = snapshot(svc, &slen);
  EXPECT(fencelock_service_tick(svc, 2), FENCELOCK_RESULT_TIME_WENT_BACKWARDS);
  EXPECT(fencelock_service_keep_alive(svc, 2, s, 0, &r), FENCELOCK_RESULT_TIME_WENT_BACKWARDS);

  /* Nothing any of that did changed the service, and it still works. */
  CHECK(unchanged(svc, before, slen));
  size_t pending = 9;
  OK(fencelock_service_pending(svc, &pending));
  CHECK(pending == 0);
  OK(fencelock_service_release(svc, 3, s, S("held"), 2, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 1));

  /* Snapshot buffers: too small says how big. */
  size_t need = 0;
  uint8_t tiny[4];
  EXPECT(fencelock_service_snapshot(svc, tiny, sizeof tiny, &need),
         FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  size_t len = 0;
  free(before);
  before = snapshot(svc, &len);
  CHECK(need == len);

  /* Truncated and corrupted snapshots: refused, nothing created. */
  fencelock_capacity cap = {2, 2, 2};
  for (size_t cut = 0; cut < len; cut++) {
    fencelock_service *rs = NULL;
    fencelock_result got = fencelock_service_restore(&cap, before, cut, &rs);
    CHECK(got == FENCELOCK_RESULT_BAD_MAGIC || got == FENCELOCK_RESULT_CORRUPT_SNAPSHOT);
    CHECK(rs == NULL);
  }
  uint8_t *flipped = malloc(len);
  for (size_t i = 0; i < len; i++) {
    memcpy(flipped, before, len);
    flipped[i] ^= 0x5a;
    fencelock_service *rs = NULL;
    fencelock_result got = fencelock_service_restore(&cap, flipped, len, &rs);
    CHECK((got == FENCELOCK_RESULT_OK) == (rs != NULL));
    CHECK(got == FENCELOCK_RESULT_OK || (got >= 100 && got < 700));
    fencelock_service_free(rs);
  }
  free(flipped);
  fencelock_capacity small = {0, 0, 0};
  fencelock_service *rs = NULL;
  EXPECT(fencelock_service_restore(&small, before, len, &rs), FENCELOCK_RESULT_CAPACITY_EXCEEDED);
  CHECK(rs == NULL);

  /* Bad configs. */
  fencelock_config bad = config(1, 1, 1);
  bad.max_name_len = 0;
  EXPECT(fencelock_service_new(&bad, &rs), FENCELOCK_RESULT_BAD_CONFIG);
  bad.max_name_len = 65;
  EXPECT(fencelock_service_new(&bad, &rs), FENCELOCK_RESULT_BAD_CONFIG);
  CHECK(rs == NULL);

  /* Gate and keeper refusals. */
  fencelock_gate *gate = NULL;
  /* A capacity too large is BAD_CONFIG (it used to abort the process). */
  EXPECT(fencelock_gate_new((size_t)INT32_MAX + 1, &gate), FENCELOCK_RESULT_BAD_CONFIG);
  EXPECT(fencelock_gate_new(SIZE_MAX, &gate), FENCELOCK_RESULT_BAD_CONFIG);
  CHECK(gate == NULL);
  OK(fencelock_gate_new(1, &gate));
  OK(fencelock_gate_last_error(gate, msg, sizeof msg, NULL));
  CHECK(strcmp(msg, "ok") == 0);
  EXPECT(fencelock_gate_admit(gate, S("r"), 0), FENCELOCK_RESULT_ZERO_TOKEN);
  EXPECT(fencelock_gate_admit(gate, (const uint8_t *)"", 0, 1), FENCELOCK_RESULT_EMPTY_NAME);
  EXPECT(fencelock_gate_admit(gate, bad_utf8, sizeof bad_utf8, 1), FENCELOCK_RESULT_INVALID_UTF8);
  OK(fencelock_gate_last_error(gate, msg, sizeof msg, NULL));
  CHECK(strncmp(msg, "invalid utf-8", 13) == 0);
  EXPECT(fencelock_gate_admit(gate, (const uint8_t *)huge, 65, 1), FENCELOCK_RESULT_NAME_TOO_LONG);
  OK(fencelock_gate_admit(gate, S("r"), 5));
  EXPECT(fencelock_gate_admit(gate, S("q"), 5), FENCELOCK_RESULT_CAPACITY_EXCEEDED);
  OK(fencelock_gate_last_error(gate, msg, sizeof msg, NULL));
  CHECK(strncmp(msg, "capacity exceeded", 17) == 0 && strstr(msg, "resources"));
  EXPECT(fencelock_gate_check(gate, S("r"), 4), FENCELOCK_RESULT_STALE);
  OK(fencelock_gate_check(gate, S("r"), 5));
  uint8_t gsnap[64];
  size_t glen = 0;
  OK(fencelock_gate_snapshot(gate, gsnap, sizeof gsnap, &glen));
  for (size_t cut = 0; cut < glen; cut++) {
    fencelock_gate *g = NULL;
    fencelock_result got = fencelock_gate_restore(1, gsnap, cut, &g);
    CHECK(got == FENCELOCK_RESULT_BAD_MAGIC || got == FENCELOCK_RESULT_CORRUPT_SNAPSHOT);
    CHECK(g == NULL);
  }
  fencelock_gate *g0 = NULL;
  EXPECT(fencelock_gate_restore(0, gsnap, glen, &g0), FENCELOCK_RESULT_CAPACITY_EXCEEDED);
  fencelock_gate_free(gate);

  fencelock_keeper *k = NULL;
  EXPECT(fencelock_keeper_new(10, 0, 2, &k), FENCELOCK_RESULT_BAD_CONFIG);
  EXPECT(fencelock_keeper_new(10, 3, 10, &k), FENCELOCK_RESULT_BAD_CONFIG);
  EXPECT(fencelock_keeper_new(10, 3, 0, &k), FENCELOCK_RESULT_BAD_CONFIG); /* no margin */
  CHECK(k == NULL);
  OK(fencelock_keeper_new(10, 3, 2, &k));
  bool ext = true;
  /* Acks of keep-alives it never recorded: none sent yet; then sends at 0 and 6, ack 4. */
  EXPECT(fencelock_keeper_keep_alive_acked(k, 0, &ext), FENCELOCK_RESULT_UNKNOWN_KEEP_ALIVE);
  OK(fencelock_keeper_keep_alive_sent(k, 0));
  OK(fencelock_keeper_keep_alive_sent(k, 6));
  EXPECT(fencelock_keeper_keep_alive_acked(k, 4, &ext), FENCELOCK_RESULT_UNKNOWN_KEEP_ALIVE);
  OK(fencelock_keeper_last_error(k, msg, sizeof msg, NULL));
  CHECK(strncmp(msg, "unknown keep-alive", 18) == 0 && strstr(msg, "4"));
  fencelock_lease lease;
  OK(fencelock_keeper_lease(k, 7, &lease));
  CHECK(lease.state == FENCELOCK_LEASE_STATE_UNCONFIRMED); /* the ack of 4 changed nothing */
  EXPECT(fencelock_keeper_keep_alive_sent(k, 5), FENCELOCK_RESULT_TIME_WENT_BACKWARDS);
  OK(fencelock_keeper_keep_alive_acked(k, 6, &ext));
  CHECK(ext);
  OK(fencelock_keeper_session_lost(k));
  bool sched = true;
  uint64_t at = 1;
  OK(fencelock_keeper_poll_timeout(k, 7, &sched, &at));
  CHECK(!sched && at == 0);
  fencelock_keeper_free(k);

  free(before);
  fencelock_service_free(svc);
}

/* ------------------------------------- elections, lock-delay, cancel and the getters */

static void elections_and_lock_delay(void) {
  fencelock_config cfg = config(4, 4, 8);
  cfg.lock_delay = 5;
  fencelock_service *svc = NULL;
  fencelock_output outs[8];
  OK(fencelock_service_new(&cfg, &svc));
  fencelock_config back;
  OK(fencelock_service_config(svc, &back));
  CHECK(back.capacity.sessions == 4 && back.capacity.locks == 4 && back.capacity.claims == 8 &&
        back.lock_delay == 5 && back.max_name_len == FENCELOCK_MAX_NAME_LEN);
  uint64_t a = open_session(svc, 0, 10);
  uint64_t b = open_session(svc, 0, 10);
  uint64_t c = open_session(svc, 0, 100);

  /* Leader election: the token is the epoch. */
  OK(fencelock_service_campaign(svc, 0, a, S("leader"), 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1));
  OK(fencelock_service_campaign(svc, 0, b, S("leader"), 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_QUEUED && r.position == 1);
  bool has = false;
  fencelock_leader leader;
  OK(fencelock_service_leader(svc, S("leader"), &has, &leader));
  CHECK(has && leader.session == a && leader.epoch == 1);
  fencelock_waiter waiters[4];
  size_t count = 0;
  OK(fencelock_service_waiters(svc, S("leader"), waiters, 4, &count));
  CHECK(count == 1 && waiters[0].session == b && !waiters[0].has_deadline &&
        waiters[0].mode == FENCELOCK_MODE_EXCLUSIVE);
  EXPECT(fencelock_service_waiters(svc, S("leader"), waiters, 0, &count),
         FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(count == 1);
  OK(fencelock_service_resign(svc, 0, a, S("leader"), 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 1));
  CHECK(drain(svc, outs, 8) == 1);
  CHECK(is_event(&outs[0], FENCELOCK_OUTPUT_KIND_GRANTED, b, "leader", 2));
  OK(fencelock_service_leader(svc, S("leader"), &has, &leader));
  CHECK(has && leader.session == b && leader.epoch == 2);
  OK(fencelock_service_resign(svc, 0, b, S("leader"), 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 2));
  OK(fencelock_service_leader(svc, S("leader"), &has, &leader));
  CHECK(!has && leader.session == 0);
  EXPECT(fencelock_service_resign(svc, 0, b, S("leader"), 0, &r), FENCELOCK_RESULT_NOT_QUEUED);

  /* Lock-delay after an expiry: the lock is not granted again for 5 ticks. */
  OK(fencelock_service_acquire(svc, 0, a, S("x"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE, 0,
                               0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 3));
  OK(fencelock_service_keep_alive(svc, 5, b, 0, &r));
  OK(fencelock_service_tick(svc, 10));
  CHECK(drain(svc, outs, 8) == 2);
  CHECK(is_event(&outs[0], FENCELOCK_OUTPUT_KIND_SESSION_EXPIRED, a, NULL, 0));
  CHECK(is_event(&outs[1], FENCELOCK_OUTPUT_KIND_RELEASED, a, "x", 3) &&
        outs[1].reason == FENCELOCK_RELEASE_REASON_EXPIRED);
  bool active = false;
  uint64_t until = 0;
  OK(fencelock_service_lock_delay_until(svc, S("x"), &active, &until));
  CHECK(active && until == 15);
  OK(fencelock_service_acquire(svc, 10, b, S("x"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_BUSY, 0));
  fencelock_usage usage;
  OK(fencelock_service_usage(svc, &usage));
  CHECK(usage.sessions == 2 && usage.locks == 1 && usage.claims == 0);
  size_t most = 0;
  OK(fencelock_service_max_events(svc, &most));
  CHECK(most == 2);
  OK(fencelock_service_keep_alive(svc, 12, b, 0, &r));
  CHECK(r.expires_at == 22);
  /* At 15 the lock-delay is over: the acquire's own advance ends it, then grants. */
  OK(fencelock_service_acquire(svc, 15, b, S("x"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 4));
  OK(fencelock_service_lock_delay_until(svc, S("x"), &active, &until));
  CHECK(!active && until == 0);

  /* A timed wait, then cancelled. */
  OK(fencelock_service_acquire(svc, 15, c, S("x"), FENCELOCK_MODE_SHARED, FENCELOCK_WAIT_UNTIL,
                               40, 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_QUEUED && r.mode == FENCELOCK_MODE_SHARED);
  OK(fencelock_service_waiters(svc, S("x"), waiters, 4, &count));
  CHECK(count == 1 && waiters[0].has_deadline && waiters[0].deadline == 40);
  OK(fencelock_service_cancel(svc, 15, c, S("x"), 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_CANCELLED, 0));
  CHECK(drain(svc, outs, 8) == 0);

  /* The keeper's clock. */
  fencelock_keeper *k = NULL;
  uint64_t due = 0, at = 0;
  bool sched = false;
  OK(fencelock_keeper_new(10, 3, 2, &k));
  OK(fencelock_keeper_next_keep_alive(k, 7, &due));
  CHECK(due == 7); /* nothing sent yet: due now */
  fencelock_lease lease;
  OK(fencelock_keeper_lease(k, 7, &lease));
  CHECK(lease.state == FENCELOCK_LEASE_STATE_UNCONFIRMED);
  OK(fencelock_keeper_keep_alive_sent(k, 7));
  OK(fencelock_keeper_next_keep_alive(k, 8, &due));
  CHECK(due == 10);
  bool ext = false;
  OK(fencelock_keeper_keep_alive_acked(k, 7, &ext));
  OK(fencelock_keeper_lease(k, 8, &lease));
  CHECK(lease.state == FENCELOCK_LEASE_STATE_SAFE && lease.until == 15);
  OK(fencelock_keeper_poll_timeout(k, 8, &sched, &at));
  CHECK(sched && at == 10);
  fencelock_keeper_free(k);
  fencelock_service_free(svc);
}

/* ------------------------------------------------------------------ messages */

static void messages(void) {
  char buf[160];
  size_t len = 0;
  const fencelock_result codes[] = {
      FENCELOCK_RESULT_OK,           FENCELOCK_RESULT_DONE,
      FENCELOCK_RESULT_UNKNOWN_SESSION, FENCELOCK_RESULT_STALE,
      FENCELOCK_RESULT_BAD_FRAME,    FENCELOCK_RESULT_NULL_PARAMETER,
      FENCELOCK_RESULT_INVALID_UTF8, FENCELOCK_RESULT_PANIC,
      FENCELOCK_RESULT_BUFFER_TOO_SMALL, FENCELOCK_RESULT_UNKNOWN_KEEP_ALIVE};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    OK(fencelock_result_message(codes[i], buf, sizeof buf, &len));
    CHECK(len > 0 && strlen(buf) == len);
  }
  OK(fencelock_result_message(FENCELOCK_RESULT_UNKNOWN_KEEP_ALIVE, buf, sizeof buf, &len));
  CHECK(strcmp(buf, "unknown keep-alive") == 0);
  OK(fencelock_result_message(FENCELOCK_RESULT_NAME_TOO_LONG, buf, sizeof buf, &len));
  CHECK(strcmp(buf, "name too long") == 0);
  EXPECT(fencelock_result_message(12345, buf, sizeof buf, &len), FENCELOCK_RESULT_INVALID_ARGUMENT);
  CHECK(strcmp(buf, "unknown result code") == 0);
  EXPECT(fencelock_result_message(904, buf, sizeof buf, &len), FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_result_message(FENCELOCK_RESULT_NAME_TOO_LONG, buf, 5, &len),
         FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(strcmp(buf, "name") == 0 && len == 13); /* truncated, NUL-terminated */
  EXPECT(fencelock_result_message(FENCELOCK_RESULT_STALE, NULL, 0, &len),
         FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  EXPECT(fencelock_result_message(FENCELOCK_RESULT_STALE, NULL, 5, &len),
         FENCELOCK_RESULT_NULL_PARAMETER);
}

/* Caller memory for placed services (placed(), and a restore below). */
static _Alignas(16) uint8_t arena[64 * 1024];

/* --------------------------------------------- semaphores, labels, watches, revision */

/* A HOLDER_CHANGED event to `watcher` about `holder` on `lock`. */
static int is_change(const fencelock_output *o, uint64_t watcher, const char *lock,
                     uint64_t holder, uint64_t token, fencelock_change change,
                     const char *label) {
  return is_event(o, FENCELOCK_OUTPUT_KIND_HOLDER_CHANGED, watcher, lock, token) &&
         o->holder == holder && o->change == change && o->label_len == strlen(label) &&
         strcmp(o->label, label) == 0 && o->reason == FENCELOCK_RELEASE_REASON_NONE;
}

static int is_permits(fencelock_mode mode, uint32_t count, uint32_t limit, uint32_t want_count,
                      uint32_t want_limit) {
  return mode == FENCELOCK_MODE_PERMITS && count == want_count && limit == want_limit;
}

static void semaphores_labels_and_watches(void) {
  fencelock_config cfg = config(8, 8, 16);
  cfg.max_watchers = 2;
  fencelock_service *svc = NULL;
  fencelock_output outs[16];
  OK(fencelock_service_new(&cfg, &svc));
  fencelock_config got_cfg;
  OK(fencelock_service_config(svc, &got_cfg));
  CHECK(got_cfg.max_watchers == 2 && got_cfg.max_name_len == FENCELOCK_MAX_NAME_LEN);

  /* Labels: shown with the session; refused before the core, changing nothing. */
  OK(fencelock_service_open_labeled(svc, 0, 100, S("worker-a"), &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_OPENED && r.expires_at == 100);
  uint64_t a = r.session;
  OK(fencelock_service_open_labeled(svc, 0, 100, S("worker-b"), &r));
  uint64_t b = r.session;
  uint64_t w = open_session(svc, 0, 100);
  OK(fencelock_service_open_labeled(svc, 0, 100, (const uint8_t *)"", 0, &r));
  uint64_t c = r.session;
  fencelock_session_info info;
  OK(fencelock_service_session(svc, a, &info));
  CHECK(info.label_len == 8 && strcmp(info.label, "worker-a") == 0);
  OK(fencelock_service_session(svc, c, &info));
  CHECK(info.label_len == 0 && info.label[0] == 0);
  size_t slen = 0;
  uint8_t *before = snapshot(svc, &slen);
  char long_label[FENCELOCK_MAX_LABEL_LEN + 1];
  memset(long_label, 'l', sizeof long_label);
  EXPECT(fencelock_service_open_labeled(svc, 0, 100, (const uint8_t *)long_label,
                                        sizeof long_label, &r),
         FENCELOCK_RESULT_LABEL_TOO_LONG);
  CHECK(no_reply());
  char msg[128];
  OK(fencelock_service_last_error(svc, msg, sizeof msg, NULL));
  CHECK(strstr(msg, "65") != NULL && strstr(msg, "64") != NULL);
  const uint8_t bad_utf8[] = {'h', 0xc3, 0x28};
  EXPECT(fencelock_service_open_labeled(svc, 0, 100, bad_utf8, sizeof bad_utf8, &r),
         FENCELOCK_RESULT_INVALID_UTF8);
  EXPECT(fencelock_service_open_labeled(svc, 0, 100, NULL, 1, &r),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_open_labeled(svc, 0, 100, S("x"), NULL),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_open_labeled(svc, 0, 0, S("x"), &r), FENCELOCK_RESULT_BAD_TTL);
  /* The label is judged before the core is given the input: not even time moves. */
  EXPECT(fencelock_service_open_labeled(svc, 50, 100, (const uint8_t *)long_label,
                                        sizeof long_label, &r),
         FENCELOCK_RESULT_LABEL_TOO_LONG);
  uint64_t t = 9;
  OK(fencelock_service_now(svc, &t));
  CHECK(t == 0);
  CHECK(unchanged(svc, before, slen));
  free(before);

  /* A watch: nobody holds "pool" yet. w's info counts it apart from holds and waits. */
  OK(fencelock_service_watch(svc, 0, w, S("pool"), 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_WATCHING && r.holders == 0 && r.pending == 0);
  OK(fencelock_service_session(svc, w, &info));
  CHECK(info.holds == 0 && info.waits == 0 && info.watches == 1);

  /* a takes 2 of 3 permits: its reply, and the watcher is told. */
  OK(fencelock_service_acquire_permits(svc, 0, a, S("pool"), 2, 3, FENCELOCK_WAIT_NONE, 0, 0,
                                       &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1) && is_permits(r.mode, r.count, r.limit, 2, 3));
  CHECK(r.pending == 1 && drain(svc, outs, 16) == 1);
  CHECK(is_change(&outs[0], w, "pool", a, 1, FENCELOCK_CHANGE_GRANTED, "worker-a"));
  CHECK(is_permits(outs[0].mode, outs[0].count, outs[0].limit, 2, 3));
  bool live = false;
  fencelock_permits p = {9, 9};
  OK(fencelock_service_permits(svc, S("pool"), &live, &p));
  CHECK(live && p.in_use == 2 && p.limit == 3);

  /* b asks for 2: it waits (2 + 2 > 3). */
  OK(fencelock_service_acquire_permits(svc, 0, b, S("pool"), 2, 3, FENCELOCK_WAIT_FOREVER, 0,
                                       0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_QUEUED && r.position == 1 &&
        is_permits(r.mode, r.count, r.limit, 2, 3));
  fencelock_holder hs[2];
  size_t n = 0;
  OK(fencelock_service_holders(svc, S("pool"), hs, 2, &n));
  CHECK(n == 1 && hs[0].session == a && hs[0].token == 1 &&
        is_permits(hs[0].mode, hs[0].count, hs[0].limit, 2, 3) && hs[0].label_len == 8 &&
        strcmp(hs[0].label, "worker-a") == 0);
  /* One session's hold, without listing every holder: a's is its hold; b only waits,
   * w only watches, 99 is no session and "none" no lock, so each has none (its fields
   * zeroed). */
  bool held = false;
  fencelock_holder h1;
  memset(&h1, 0x5a, sizeof h1);
  OK(fencelock_service_hold(svc, a, S("pool"), &held, &h1));
  CHECK(held && h1.session == a && h1.token == 1 && is_permits(h1.mode, h1.count, h1.limit, 2, 3) &&
        h1.label_len == 8 && strcmp(h1.label, "worker-a") == 0);
  const uint64_t holdless[] = {b, w, 99};
  for (size_t i = 0; i < 3; i++) {
    held = true;
    memset(&h1, 0x5a, sizeof h1);
    OK(fencelock_service_hold(svc, holdless[i], S("pool"), &held, &h1));
    CHECK(!held && h1.session == 0 && h1.token == 0 && h1.mode == FENCELOCK_MODE_NONE &&
          h1.count == 0 && h1.limit == 0 && h1.label_len == 0 && h1.label[0] == 0);
  }
  held = true;
  memset(&h1, 0x5a, sizeof h1);
  OK(fencelock_service_hold(svc, a, S("none"), &held, &h1));
  CHECK(!held && h1.session == 0 && h1.token == 0 && h1.mode == FENCELOCK_MODE_NONE &&
        h1.label_len == 0);
  EXPECT(fencelock_service_hold(svc, a, S("pool"), NULL, &h1), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_hold(svc, a, S("pool"), &held, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_hold(svc, a, NULL, 4, &held, &h1), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_hold(svc, a, bad_utf8, sizeof bad_utf8, &held, &h1),
         FENCELOCK_RESULT_INVALID_UTF8);
  fencelock_waiter ws[2];
  OK(fencelock_service_waiters(svc, S("pool"), ws, 2, &n));
  CHECK(n == 1 && ws[0].session == b && !ws[0].has_deadline &&
        is_permits(ws[0].mode, ws[0].count, ws[0].limit, 2, 3) &&
        strcmp(ws[0].label, "worker-b") == 0);

  /* Refusals change nothing: another limit, a plain mode on a semaphore, a count outside
   * 1..=limit, PERMITS through the plain acquire (it has no count), already watching. */
  before = snapshot(svc, &slen);
  EXPECT(fencelock_service_acquire_permits(svc, 0, c, S("pool"), 1, 4, FENCELOCK_WAIT_NONE, 0,
                                           0, &r),
         FENCELOCK_RESULT_LIMIT_MISMATCH);
  CHECK(no_reply());
  EXPECT(fencelock_service_acquire(svc, 0, c, S("pool"), FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_LIMIT_MISMATCH);
  EXPECT(fencelock_service_acquire_permits(svc, 0, c, S("pool"), 0, 3, FENCELOCK_WAIT_NONE, 0,
                                           0, &r),
         FENCELOCK_RESULT_BAD_PERMITS);
  EXPECT(fencelock_service_acquire_permits(svc, 0, c, S("pool"), 4, 3, FENCELOCK_WAIT_NONE, 0,
                                           0, &r),
         FENCELOCK_RESULT_BAD_PERMITS);
  EXPECT(fencelock_service_acquire(svc, 0, c, S("pool"), FENCELOCK_MODE_PERMITS,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_service_acquire_permits(svc, 0, c, S("pool"), 1, 3, 9, 0, 0, &r),
         FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_service_acquire_permits(svc, 0, c, NULL, 4, 1, 3, FENCELOCK_WAIT_NONE, 0, 0,
                                           &r),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_acquire_permits(svc, 0, c, S("pool"), 1, 3, FENCELOCK_WAIT_NONE, 0,
                                           0, NULL),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_watch(svc, 0, w, S("pool"), 0, &r),
         FENCELOCK_RESULT_ALREADY_WATCHING);
  EXPECT(fencelock_service_unwatch(svc, 0, a, S("pool"), 0, &r), FENCELOCK_RESULT_NOT_WATCHING);
  EXPECT(fencelock_service_watch(svc, 0, 99, S("pool"), 0, &r), FENCELOCK_RESULT_UNKNOWN_SESSION);
  EXPECT(fencelock_service_watch(svc, 0, w, bad_utf8, sizeof bad_utf8, 0, &r),
         FENCELOCK_RESULT_INVALID_UTF8);
  EXPECT(fencelock_service_watch(svc, 0, w, (const uint8_t *)"", 0, 0, &r),
         FENCELOCK_RESULT_EMPTY_NAME);
  EXPECT(fencelock_service_permits(svc, S("pool"), NULL, &p), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_permits(svc, S("pool"), &live, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_permits(svc, bad_utf8, sizeof bad_utf8, &live, &p),
         FENCELOCK_RESULT_INVALID_UTF8);
  /* A try-acquire that would fit (2 + 1 <= 3) is busy: b waits ahead of it (FIFO). */
  OK(fencelock_service_acquire_permits(svc, 0, c, S("pool"), 1, 3, FENCELOCK_WAIT_NONE, 0, 0,
                                       &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_BUSY);
  CHECK(unchanged(svc, before, slen));
  free(before);
  CHECK(drain(svc, outs, 16) == 0);

  /* a releases: the watcher hears of it, then b is granted and the watcher hears that. */
  OK(fencelock_service_release(svc, 1, a, S("pool"), 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 1) && r.pending == 3);
  CHECK(drain(svc, outs, 16) == 3);
  CHECK(is_change(&outs[0], w, "pool", a, 1, FENCELOCK_CHANGE_RELEASED, "worker-a"));
  CHECK(is_event(&outs[1], FENCELOCK_OUTPUT_KIND_GRANTED, b, "pool", 2) &&
        is_permits(outs[1].mode, outs[1].count, outs[1].limit, 2, 3));
  CHECK(is_change(&outs[2], w, "pool", b, 2, FENCELOCK_CHANGE_GRANTED, "worker-b"));

  /* Unwatch; a second unwatch is refused. A new watch starts with the current holder. */
  OK(fencelock_service_unwatch(svc, 1, w, S("pool"), 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_UNWATCHED && r.pending == 0);
  EXPECT(fencelock_service_unwatch(svc, 1, w, S("pool"), 0, &r), FENCELOCK_RESULT_NOT_WATCHING);
  OK(fencelock_service_watch(svc, 1, c, S("pool"), 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_WATCHING && r.holders == 1);
  CHECK(drain(svc, outs, 16) == 1);
  CHECK(is_change(&outs[0], c, "pool", b, 2, FENCELOCK_CHANGE_HOLDING, "worker-b"));

  /* max_watchers 2: a third watcher of one lock is refused (the watchers table). */
  OK(fencelock_service_watch(svc, 1, a, S("pool"), 0, &r));
  CHECK(drain(svc, outs, 16) == 1);
  before = snapshot(svc, &slen);
  EXPECT(fencelock_service_watch(svc, 1, w, S("pool"), 0, &r),
         FENCELOCK_RESULT_CAPACITY_EXCEEDED);
  OK(fencelock_service_last_error(svc, msg, sizeof msg, NULL));
  CHECK(strstr(msg, "watchers") != NULL);
  CHECK(unchanged(svc, before, slen));
  free(before);

  /* b closes: its own RELEASED event, then each watcher hears of it. */
  OK(fencelock_service_close_session(svc, 2, b, 0, &r));
  CHECK(drain(svc, outs, 16) == 3);
  CHECK(is_event(&outs[0], FENCELOCK_OUTPUT_KIND_RELEASED, b, "pool", 2) &&
        outs[0].reason == FENCELOCK_RELEASE_REASON_CLOSED);
  CHECK(is_change(&outs[1], c, "pool", b, 2, FENCELOCK_CHANGE_CLOSED, "worker-b"));
  CHECK(is_change(&outs[2], a, "pool", b, 2, FENCELOCK_CHANGE_CLOSED, "worker-b"));
  OK(fencelock_service_permits(svc, S("pool"), &live, &p));
  CHECK(!live && p.in_use == 0 && p.limit == 0);

  /* raise_revision: the next token is above the floor; a lower floor changes nothing; a
   * floor above 2^62 and a NULL out-pointer are refused, changing nothing. */
  uint64_t rev = 0;
  OK(fencelock_service_raise_revision(svc, 1000, &rev));
  CHECK(rev == 1000);
  OK(fencelock_service_raise_revision(svc, 5, &rev));
  CHECK(rev == 1000);
  before = snapshot(svc, &slen);
  EXPECT(fencelock_service_raise_revision(svc, (UINT64_C(1) << 62) + 1, &rev),
         FENCELOCK_RESULT_BAD_CONFIG);
  EXPECT(fencelock_service_raise_revision(svc, 2000, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_raise_revision(NULL, 2000, &rev), FENCELOCK_RESULT_NULL_PARAMETER);
  CHECK(unchanged(svc, before, slen));
  free(before);
  OK(fencelock_service_revision(svc, &rev));
  CHECK(rev == 1000);
  OK(fencelock_service_acquire(svc, 3, w, S("after"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_NONE, 0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1001));
  fencelock_service_free(svc);

  /* max_watchers 0 turns watches off. */
  cfg.max_watchers = 0;
  OK(fencelock_service_new(&cfg, &svc));
  uint64_t s = open_session(svc, 0, 10);
  EXPECT(fencelock_service_watch(svc, 0, s, S("pool"), 0, &r),
         FENCELOCK_RESULT_CAPACITY_EXCEEDED);
  fencelock_service_free(svc);

  /* A snapshot of a service with max_watchers 8 restores into caller memory sized for 8
   * (its event ring must hold the bound for 8), not into the default layout's. */
  fencelock_config small = config(2, 2, 16);
  small.max_watchers = 8;
  OK(fencelock_service_new(&small, &svc));
  s = open_session(svc, 0, 10);
  OK(fencelock_service_watch(svc, 0, s, S("pool"), 0, &r));
  before = snapshot(svc, &slen);
  fencelock_service_free(svc);
  size_t size = 0, align = 0, size8 = 0;
  OK(fencelock_service_layout(&small.capacity, &size, &align));
  OK(fencelock_service_layout_watchers(&small.capacity, 8, &size8, &align));
  CHECK(size8 > size && size8 <= sizeof arena);
  fencelock_service *placed_svc = NULL;
  EXPECT(fencelock_service_restore_in(arena, size, &small.capacity, before, slen, &placed_svc),
         FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(placed_svc == NULL);
  OK(fencelock_service_restore_in(arena, size8, &small.capacity, before, slen, &placed_svc));
  CHECK(unchanged(placed_svc, before, slen));
  OK(fencelock_service_config(placed_svc, &got_cfg));
  CHECK(got_cfg.max_watchers == 8);
  OK(fencelock_service_unwatch(placed_svc, 1, s, S("pool"), 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_UNWATCHED);
  fencelock_service_free(placed_svc);
  free(before);
}

/* ------------------------------------------------------- caller-provided memory */


static void placed(void) {
  fencelock_config cfg = config(4, 4, 8);
  size_t size = 0, align = 0;
  OK(fencelock_service_layout(&cfg.capacity, &size, &align));
  CHECK(size > 0 && 2 * size + 16 <= sizeof arena && align > 1 && align <= 16);
  fencelock_service *svc = NULL;
  EXPECT(fencelock_service_init_in(arena + 1, size, &cfg, &svc),
         FENCELOCK_RESULT_MISALIGNED_MEMORY);
  EXPECT(fencelock_service_init_in(arena, size - 1, &cfg, &svc),
         FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  EXPECT(fencelock_service_init_in(NULL, size, &cfg, &svc), FENCELOCK_RESULT_NULL_PARAMETER);
  CHECK(svc == NULL);
  OK(fencelock_service_init_in(arena, size, &cfg, &svc));
  CHECK((void *)svc == (void *)arena);
  fencelock_output outs[32];
  uint64_t a = open_session(svc, 0, 10);
  uint64_t b = open_session(svc, 0, 10);
  OK(fencelock_service_acquire(svc, 0, a, S("l"), FENCELOCK_MODE_SHARED, FENCELOCK_WAIT_NONE, 0,
                               0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1));
  OK(fencelock_service_acquire(svc, 0, b, S("l"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_UNTIL,
                               5, 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_QUEUED);
  OK(fencelock_service_tick(svc, 5));
  CHECK(drain(svc, outs, 32) == 1 && outs[0].kind == FENCELOCK_OUTPUT_KIND_WAIT_TIMED_OUT &&
        outs[0].session == b && strcmp(outs[0].lock, "l") == 0);
  /* Restore into a second region of the arena from the first's snapshot. */
  size_t len = 0;
  uint8_t *snap = snapshot(svc, &len);
  fencelock_service *copy = NULL;
  uint8_t *second = arena + ((size + 15) / 16) * 16;
  OK(fencelock_service_restore_in(second, size, &cfg.capacity, snap, len, &copy));
  CHECK(copy != NULL && unchanged(copy, snap, len));
  /* Wait-forever, then the close that grants it: the ring takes the events. */
  OK(fencelock_service_acquire(copy, 5, b, S("l"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_FOREVER, 0, 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_QUEUED);
  OK(fencelock_service_close_session(copy, 5, a, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_CLOSED, 0));
  /* The ring (4 + 2 × 8 + 17 × 4 = 88) holds 2 events; the next input may emit up to
   * 1 + 2 = 3. */
  OK(fencelock_service_keep_alive(copy, 6, b, 0, &r));
  CHECK(drain(copy, outs, 32) == 2);
  CHECK(is_event(&outs[0], FENCELOCK_OUTPUT_KIND_RELEASED, a, "l", 1));
  CHECK(outs[0].reason == FENCELOCK_RELEASE_REASON_CLOSED);
  CHECK(is_event(&outs[1], FENCELOCK_OUTPUT_KIND_GRANTED, b, "l", 2));
  free(snap);
  fencelock_service_free(copy);
  fencelock_service_free(svc);

  /* A full ring: the core refuses the input (BUFFER_TOO_SMALL, nothing changes) until
   * the ring is drained. Capacities 1/1/1 and watches off: a ring of 3 events. A config
   * with watches needs the bigger layout for its max_watchers: 1 + 2 + 3 × 1 = 6. */
  fencelock_config tiny = config(1, 1, 1);
  size_t watched = 0;
  OK(fencelock_service_layout(&tiny.capacity, &watched, &align));
  tiny.max_watchers = 0;
  OK(fencelock_service_layout_watchers(&tiny.capacity, 0, &size, &align));
  CHECK(watched > size);
  EXPECT(fencelock_service_layout_watchers(NULL, 0, &size, &align),
         FENCELOCK_RESULT_NULL_PARAMETER);
  tiny.max_watchers = 1;
  EXPECT(fencelock_service_init_in(arena, size, &tiny, &svc), FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  tiny.max_watchers = 0;
  OK(fencelock_service_init_in(arena, size, &tiny, &svc));
  a = open_session(svc, 0, 2);
  OK(fencelock_service_acquire(svc, 0, a, S("l"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  OK(fencelock_service_tick(svc, 2)); /* SessionExpired + Released: 2 of 3 slots used */
  b = open_session(svc, 2, 10);        /* no session open: it may emit nothing */
  /* 1 session, no claims: it may emit 1 event, and 1 slot is free. */
  OK(fencelock_service_acquire(svc, 2, b, S("m"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  /* 1 session, 1 claim: an input may emit 3 events, and 1 slot is free. */
  EXPECT(fencelock_service_keep_alive(svc, 3, b, 0, &r), FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(no_reply());
  char msg[128];
  OK(fencelock_service_last_error(svc, msg, sizeof msg, NULL));
  CHECK(strncmp(msg, "buffer too small", 16) == 0);
  uint64_t now = 0;
  OK(fencelock_service_now(svc, &now));
  CHECK(now == 2); /* refused before the advance: not even time moved */
  CHECK(drain(svc, outs, 32) == 2);
  OK(fencelock_service_keep_alive(svc, 3, b, 0, &r));
  CHECK(r.expires_at == 13);
  fencelock_service_free(svc);
}

/* A handle of another kind where one is due — what a cast through void * lets a C program
 * (or a ctypes one) pass — is refused with INVALID_HANDLE and changes nothing; _free frees
 * nothing. A placed service is refused after its _free, and a second _free is harmless. */
static void wrong_handles(void) {
  fencelock_config cfg = config(2, 2, 2);
  fencelock_service *svc = NULL;
  fencelock_gate *gate = NULL;
  fencelock_keeper *keeper = NULL;
  OK(fencelock_service_new(&cfg, &svc));
  OK(fencelock_gate_new(2, &gate));
  OK(fencelock_keeper_new(10, 3, 2, &keeper));
  uint64_t s = open_session(svc, 0, 10);
  OK(fencelock_gate_admit(gate, S("r"), 5));
  size_t slen = 0;
  uint8_t *before = snapshot(svc, &slen);
  void *as_void = gate;
  fencelock_service *not_a_service = as_void;
  EXPECT(fencelock_service_acquire(not_a_service, 1, s, S("l"), FENCELOCK_MODE_EXCLUSIVE,
                                   FENCELOCK_WAIT_NONE, 0, 0, &r),
         FENCELOCK_RESULT_INVALID_HANDLE);
  CHECK(no_reply());
  EXPECT(fencelock_service_tick((fencelock_service *)(void *)keeper, 1),
         FENCELOCK_RESULT_INVALID_HANDLE);
  EXPECT(fencelock_gate_admit((fencelock_gate *)(void *)svc, S("r"), 9),
         FENCELOCK_RESULT_INVALID_HANDLE);
  EXPECT(fencelock_keeper_keep_alive_sent((fencelock_keeper *)(void *)gate, 1),
         FENCELOCK_RESULT_INVALID_HANDLE);
  char msg[128];
  EXPECT(fencelock_gate_last_error((const fencelock_gate *)(void *)keeper, msg, sizeof msg, NULL),
         FENCELOCK_RESULT_INVALID_HANDLE);
  OK(fencelock_result_message(FENCELOCK_RESULT_INVALID_HANDLE, msg, sizeof msg, NULL));
  CHECK(strncmp(msg, "invalid handle", 14) == 0);
  /* _free of the wrong kind frees nothing: all three still work. */
  fencelock_service_free((fencelock_service *)(void *)gate);
  fencelock_gate_free((fencelock_gate *)(void *)keeper);
  fencelock_keeper_free((fencelock_keeper *)(void *)svc);
  CHECK(unchanged(svc, before, slen));
  OK(fencelock_service_last_error(svc, msg, sizeof msg, NULL));
  CHECK(strcmp(msg, "ok") == 0);
  EXPECT(fencelock_gate_check(gate, S("r"), 4), FENCELOCK_RESULT_STALE);
  OK(fencelock_keeper_keep_alive_sent(keeper, 1));
  free(before);
  fencelock_keeper_free(keeper);
  fencelock_gate_free(gate);
  fencelock_service_free(svc);

  /* A placed service after its _free: the memory is ours, and says the service ended. */
  size_t size = 0, align = 0;
  OK(fencelock_service_layout(&cfg.capacity, &size, &align));
  CHECK(size <= sizeof arena);
  OK(fencelock_service_init_in(arena, size, &cfg, &svc));
  s = open_session(svc, 0, 10);
  fencelock_service_free(svc);
  EXPECT(fencelock_service_keep_alive(svc, 1, s, 0, &r), FENCELOCK_RESULT_INVALID_HANDLE);
  fencelock_service_free(svc); /* a second free: refused, harmless */
  OK(fencelock_service_init_in(arena, size, &cfg, &svc));
  CHECK(open_session(svc, 0, 10) == 1);
  fencelock_service_free(svc);
}

/* fencelock_service_drain_events: every event of an input in one call, into the caller's
 * array; too small an array gets BUFFER_TOO_SMALL with the count needed and loses nothing;
 * hostile arguments are refused without dequeuing; a placed service's ring drains too. */
static void drain_events_in_one_call(void) {
  fencelock_config cfg = config(4, 4, 8);
  fencelock_service *svc = NULL;
  OK(fencelock_service_new(&cfg, &svc));
  uint64_t a = open_session(svc, 0, 5), b = open_session(svc, 0, 100),
           c = open_session(svc, 0, 100);
  fencelock_output ev[8];
  size_t n = 99;
  OK(fencelock_service_drain_events(svc, ev, 8, &n)); /* nothing queued: OK, 0, no DONE */
  CHECK(n == 0);
  OK(fencelock_service_drain_events(svc, NULL, 0, &n)); /* a count query of nothing */
  CHECK(n == 0);
  OK(fencelock_service_acquire(svc, 0, a, S("q"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_NONE, 0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1));
  OK(fencelock_service_acquire(svc, 0, b, S("q"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_FOREVER, 0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_QUEUED, 0));
  /* A hand-off: the release's reply is the caller's, the grant to b the one event. */
  CHECK(r.pending == 0); /* queued: no event for anyone */
  OK(fencelock_service_release(svc, 0, a, S("q"), 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 1));
  CHECK(r.pending == 1); /* the reply says how many to drain */
  OK(fencelock_service_drain_events(svc, ev, r.pending, &n));
  CHECK(n == 1 && is_event(&ev[0], FENCELOCK_OUTPUT_KIND_GRANTED, b, "q", 2));
  CHECK(ev[0].mode == FENCELOCK_MODE_EXCLUSIVE);
  OK(fencelock_service_drain_events(svc, ev, 8, &n)); /* drained: the queue is empty */
  CHECK(n == 0);

  /* a holds r, c waits for it; a expires: SessionExpired, Released, Granted (3 events). */
  OK(fencelock_service_acquire(svc, 0, a, S("r"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_NONE, 0, 0, &r));
  OK(fencelock_service_acquire(svc, 0, c, S("r"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_FOREVER, 0, 0, &r));
  OK(fencelock_service_tick(svc, 5));
  OK(fencelock_service_keep_alive(svc, 5, b, 0, &r));
  CHECK(r.kind == FENCELOCK_REPLY_KIND_KEPT_ALIVE && r.pending == 3); /* undrained count too */
  EXPECT(fencelock_service_keep_alive(svc, 5, a, 0, &r), FENCELOCK_RESULT_UNKNOWN_SESSION);
  CHECK(no_reply() && r.pending == 0); /* a refusal's reply is all zero */
  size_t pending = 0;
  OK(fencelock_service_pending(svc, &pending));
  CHECK(pending == 3);
  /* Too small: the count needed, nothing written, nothing dequeued. */
  memset(ev, 0xAB, sizeof ev);
  n = 0;
  EXPECT(fencelock_service_drain_events(svc, ev, 2, &n), FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(n == 3);
  CHECK(((const unsigned char *)ev)[0] == 0xAB && ((const unsigned char *)ev)[sizeof ev - 1] == 0xAB);
  char msg[128];
  OK(fencelock_service_last_error(svc, msg, sizeof msg, NULL));
  CHECK(strncmp(msg, "buffer too small", 16) == 0);
  n = 0;
  EXPECT(fencelock_service_drain_events(svc, NULL, 0, &n), FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(n == 3); /* the count query */
  /* Hostile arguments: refused, nothing dequeued, n untouched where it cannot be written. */
  n = 7;
  EXPECT(fencelock_service_drain_events(NULL, ev, 8, &n), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_drain_events(svc, ev, 8, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_drain_events(svc, NULL, 8, &n), FENCELOCK_RESULT_NULL_PARAMETER);
  CHECK(n == 7);
  EXPECT(fencelock_service_drain_events(svc, NULL, SIZE_MAX, &n),
         FENCELOCK_RESULT_NULL_PARAMETER);
  OK(fencelock_service_pending(svc, &pending));
  CHECK(pending == 3);
  /* An array of exactly the size needed is enough. */
  OK(fencelock_service_drain_events(svc, ev, 3, &n));
  CHECK(n == 3);
  CHECK(is_event(&ev[0], FENCELOCK_OUTPUT_KIND_SESSION_EXPIRED, a, NULL, 0));
  CHECK(is_event(&ev[1], FENCELOCK_OUTPUT_KIND_RELEASED, a, "r", 3));
  CHECK(ev[1].reason == FENCELOCK_RELEASE_REASON_EXPIRED);
  CHECK(is_event(&ev[2], FENCELOCK_OUTPUT_KIND_GRANTED, c, "r", 4));
  CHECK(drain(svc, ev, 8) == 0); /* poll_output agrees: nothing left */
  fencelock_service_free(svc);

  /* A placed service: events come out of its ring, and an array of sessions + 2 x claims
   * slots always fits one input's events. */
  size_t size = 0, align = 0;
  fencelock_capacity cap = {.sessions = 2, .locks = 2, .claims = 2};
  OK(fencelock_service_layout(&cap, &size, &align));
  void *mem = aligned_alloc(align, (size + align - 1) / align * align);
  cfg = config(2, 2, 2);
  fencelock_service *p = NULL;
  OK(fencelock_service_init_in(mem, size, &cfg, &p));
  a = open_session(p, 0, 3);
  b = open_session(p, 0, 100);
  OK(fencelock_service_acquire(p, 0, a, S("x"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_NONE, 0, 0, &r));
  OK(fencelock_service_acquire(p, 0, b, S("x"), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_FOREVER, 0, 0, &r));
  fencelock_output ring_ev[2 + 2 * 2];
  OK(fencelock_service_tick(p, 3));
  OK(fencelock_service_drain_events(p, ring_ev, sizeof ring_ev / sizeof ring_ev[0], &n));
  CHECK(n == 3 && is_event(&ring_ev[2], FENCELOCK_OUTPUT_KIND_GRANTED, b, "x", 2));
  fencelock_service_free(p);
  free(mem);
}

/* A service from fencelock_service_new queues events up to its event limit (twice the
 * core's bound at capacity by default), so a host that never drains is refused
 * (BUFFER_TOO_SMALL, nothing changes) rather than growing the queue without end. The
 * limit may be set down to the bound, no lower; a placed ring's limit is its size. */
static void heap_event_limit(void) {
  fencelock_config tiny = config(1, 1, 1);
  tiny.max_watchers = 0; /* the bound: 1 + 2 x 1 = 3 events */
  fencelock_service *svc = NULL;
  OK(fencelock_service_new(&tiny, &svc));
  size_t limit = 0;
  OK(fencelock_service_event_limit(svc, &limit));
  CHECK(limit == 6);
  EXPECT(fencelock_service_set_event_limit(svc, 2), FENCELOCK_RESULT_INVALID_ARGUMENT);
  EXPECT(fencelock_service_set_event_limit(NULL, 3), FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_event_limit(svc, NULL), FENCELOCK_RESULT_NULL_PARAMETER);
  OK(fencelock_service_event_limit(svc, &limit));
  CHECK(limit == 6); /* a refused limit changes nothing */
  OK(fencelock_service_set_event_limit(svc, 3));
  OK(fencelock_service_event_limit(svc, &limit));
  CHECK(limit == 3);
  /* The placed ring's story, on the heap: 2 of 3 events queued, then an input that may
   * emit 3 is refused until the host drains. */
  uint64_t a = open_session(svc, 0, 2);
  OK(fencelock_service_acquire(svc, 0, a, S("l"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  OK(fencelock_service_tick(svc, 2));
  uint64_t b = open_session(svc, 2, 10);
  OK(fencelock_service_acquire(svc, 2, b, S("m"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  size_t len = 0;
  uint8_t *before = snapshot(svc, &len);
  EXPECT(fencelock_service_keep_alive(svc, 3, b, 0, &r), FENCELOCK_RESULT_BUFFER_TOO_SMALL);
  CHECK(no_reply());
  CHECK(unchanged(svc, before, len)); /* byte for byte, time included */
  free(before);
  size_t pending = 0;
  OK(fencelock_service_pending(svc, &pending));
  CHECK(pending == 2);
  fencelock_output outs[4];
  CHECK(drain(svc, outs, 4) == 2);
  OK(fencelock_service_keep_alive(svc, 3, b, 0, &r));
  CHECK(r.expires_at == 13);
  OK(fencelock_service_set_event_limit(svc, SIZE_MAX)); /* as unbounded as memory */
  fencelock_service_free(svc);

  size_t size = 0, align = 0;
  OK(fencelock_service_layout_watchers(&tiny.capacity, 0, &size, &align));
  OK(fencelock_service_init_in(arena, size, &tiny, &svc));
  OK(fencelock_service_event_limit(svc, &limit));
  CHECK(limit == 3);
  OK(fencelock_service_set_event_limit(svc, 3)); /* its own size: accepted, a no-op */
  EXPECT(fencelock_service_set_event_limit(svc, 6), FENCELOCK_RESULT_INVALID_ARGUMENT);
  fencelock_service_free(svc);
}

/* -------------------------------------------------------------------- release_hold */

/* The one holder of lock "l" is `session` with `token` (or there is none: session 0). */
static int holds_l(fencelock_service *svc, uint64_t session, uint64_t token) {
  fencelock_holder holders[4];
  size_t count = 99;
  OK(fencelock_service_holders(svc, S("l"), holders, 4, &count));
  if (session == 0) return count == 0;
  return count == 1 && holders[0].session == session && holders[0].token == token;
}

/* fencelock_service_release_hold: the hold of its token is released as a release would
 * (the same reply, events and state as a twin's release); after a release and a
 * re-acquire the old token is refused with NOT_HOLDER, changing nothing, and the new
 * hold stays until its own token releases it; a RELEASE_HOLD batch op; bad input. */
static void release_hold(void) {
  fencelock_config cfg = config(4, 4, 8);
  fencelock_service *svc = NULL, *twin = NULL;
  OK(fencelock_service_new(&cfg, &svc));
  OK(fencelock_service_new(&cfg, &twin));
  fencelock_service *both[2] = {svc, twin};
  uint64_t a = 0, b = 0;
  for (int i = 0; i < 2; i++) {
    a = open_session(both[i], 0, 100);
    b = open_session(both[i], 0, 100);
    OK(fencelock_service_acquire(both[i], 0, a, S("l"), FENCELOCK_MODE_EXCLUSIVE,
                                 FENCELOCK_WAIT_NONE, 0, 0, &r));
    CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 1));
    OK(fencelock_service_acquire(both[i], 0, b, S("l"), FENCELOCK_MODE_EXCLUSIVE,
                                 FENCELOCK_WAIT_FOREVER, 0, 0, &r));
    CHECK(r.kind == FENCELOCK_REPLY_KIND_QUEUED);
  }

  /* a's hold of token 1: released, b granted 2, as a plain release does it. */
  OK(fencelock_service_release_hold(svc, 1, a, S("l"), 1, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 1) && r.pending == 1);
  fencelock_reply by_token = r;
  OK(fencelock_service_release(twin, 1, a, S("l"), 0, &r));
  /* Field by field: the struct's tail padding is not written. */
  CHECK(by_token.kind == r.kind && by_token.mode == r.mode && by_token.position == r.position &&
        by_token.pending == r.pending && by_token.session == r.session &&
        by_token.expires_at == r.expires_at && by_token.token == r.token && by_token.now == r.now &&
        by_token.count == r.count && by_token.limit == r.limit && by_token.holders == r.holders);
  fencelock_output outs[4], twin_outs[4];
  CHECK(drain(svc, outs, 4) == 1 && drain(twin, twin_outs, 4) == 1);
  CHECK(is_event(&outs[0], FENCELOCK_OUTPUT_KIND_GRANTED, b, "l", 2));
  CHECK(is_event(&twin_outs[0], FENCELOCK_OUTPUT_KIND_GRANTED, b, "l", 2));
  size_t len = 0;
  uint8_t *snap = snapshot(twin, &len);
  CHECK(unchanged(svc, snap, len));
  free(snap);
  fencelock_service_free(twin);

  /* b releases; a takes the lock again: token 3 is its hold now, token 1 is over. */
  OK(fencelock_service_release(svc, 2, b, S("l"), 0, &r));
  OK(fencelock_service_acquire(svc, 2, a, S("l"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 3));
  snap = snapshot(svc, &len);
  EXPECT(fencelock_service_release_hold(svc, 2, a, S("l"), 1, 0, &r),
         FENCELOCK_RESULT_NOT_HOLDER);
  CHECK(no_reply());
  char msg[128];
  OK(fencelock_service_last_error(svc, msg, sizeof msg, NULL));
  CHECK(strstr(msg, "holder") != NULL);
  /* Another session's token is not a hold of this one either. */
  EXPECT(fencelock_service_release_hold(svc, 2, b, S("l"), 3, 0, &r),
         FENCELOCK_RESULT_NOT_HOLDER);
  /* The session, then the name, come first, as for release. */
  EXPECT(fencelock_service_release_hold(svc, 2, 99, S(""), 3, 0, &r),
         FENCELOCK_RESULT_UNKNOWN_SESSION);
  EXPECT(fencelock_service_release_hold(svc, 2, a, S(""), 3, 0, &r), FENCELOCK_RESULT_EMPTY_NAME);
  CHECK(unchanged(svc, snap, len));
  CHECK(drain(svc, outs, 4) == 0);
  CHECK(holds_l(svc, a, 3)); /* the new hold stays */

  /* What cannot be handed to the core, at a later now: nothing changes, not even time. */
  static const uint8_t bad_utf8[] = {'l', 0xff};
  EXPECT(fencelock_service_release_hold(NULL, 9, a, S("l"), 3, 0, &r),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_release_hold(svc, 9, a, S("l"), 3, 0, NULL),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_release_hold(svc, 9, a, NULL, 1, 3, 0, &r),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_release_hold(svc, 9, a, bad_utf8, sizeof bad_utf8, 3, 0, &r),
         FENCELOCK_RESULT_INVALID_UTF8);
  CHECK(no_reply());
  uint64_t now = 0;
  OK(fencelock_service_now(svc, &now));
  CHECK(now == 2);
  CHECK(unchanged(svc, snap, len));
  free(snap);

  /* The new hold's own token releases it. */
  OK(fencelock_service_release_hold(svc, 3, a, S("l"), 3, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_RELEASED, 3) && r.pending == 0);
  CHECK(holds_l(svc, 0, 0));

  /* A batch op: `token` names the hold. */
  OK(fencelock_service_acquire(svc, 4, a, S("l"), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  CHECK(is_reply(FENCELOCK_REPLY_KIND_GRANTED, 4));
  fencelock_op ops[] = {
      {.kind = FENCELOCK_OP_KIND_RELEASE_HOLD, .session = a, .lock = (const uint8_t *)"l",
       .lock_len = 1, .token = 3}, /* over */
      {.kind = FENCELOCK_OP_KIND_RELEASE_HOLD, .session = a, .lock = (const uint8_t *)"l",
       .lock_len = 1, .token = 4},
  };
  fencelock_reply replies[2];
  fencelock_result results[2];
  size_t done = 99;
  OK(fencelock_service_submit(svc, 4, ops, 2, replies, results, &done));
  CHECK(done == 2);
  CHECK(results[0] == FENCELOCK_RESULT_NOT_HOLDER && replies[0].kind == FENCELOCK_REPLY_KIND_NONE);
  CHECK(results[1] == FENCELOCK_RESULT_OK && replies[1].kind == FENCELOCK_REPLY_KIND_RELEASED &&
        replies[1].token == 4);
  CHECK(holds_l(svc, 0, 0));
  fencelock_service_free(svc);
}

/* ------------------------------------------------------------------------- batches */

/* A batch from C: the GC-pause hand-off as one submit (designated initializers, the
 * fields a kind does not use left zero), a refusal that does not stop it, a batch that
 * stops for time, and the same story one call at a time giving the same snapshot. */
static void batches(void) {
  fencelock_config cfg = config(4, 4, 8);
  fencelock_service *svc = NULL, *twin = NULL;
  OK(fencelock_service_new(&cfg, &svc));
  OK(fencelock_service_new(&cfg, &twin));
  const char *job = "jobs/reindex";
  fencelock_op ops[] = {
      {.kind = FENCELOCK_OP_KIND_OPEN_SESSION, .ttl = 10},
      {.kind = FENCELOCK_OP_KIND_OPEN_SESSION, .ttl = 10},
      {.kind = FENCELOCK_OP_KIND_ACQUIRE, .session = 1, .lock = (const uint8_t *)job,
       .lock_len = 12,
       .mode = FENCELOCK_MODE_EXCLUSIVE, .wait = FENCELOCK_WAIT_NONE},
      {.kind = FENCELOCK_OP_KIND_ACQUIRE, .session = 2, .lock = (const uint8_t *)job,
       .lock_len = 12,
       .mode = FENCELOCK_MODE_EXCLUSIVE, .wait = FENCELOCK_WAIT_FOREVER, .request_number = 1},
      {.kind = FENCELOCK_OP_KIND_RELEASE, .session = 2, .lock = (const uint8_t *)job,
       .lock_len = 12}, /* not the holder */
      {.kind = FENCELOCK_OP_KIND_RELEASE, .session = 1, .lock = (const uint8_t *)job,
       .lock_len = 12}, /* grants 2 */
  };
  enum { N = sizeof ops / sizeof ops[0] };
  fencelock_reply replies[N];
  fencelock_result results[N];
  size_t done = 99;
  OK(fencelock_service_submit(svc, 0, ops, N, replies, results, &done));
  CHECK(done == N);
  CHECK(results[0] == FENCELOCK_RESULT_OK && replies[0].kind == FENCELOCK_REPLY_KIND_OPENED &&
        replies[0].session == 1 && replies[1].session == 2);
  CHECK(results[2] == FENCELOCK_RESULT_OK && replies[2].kind == FENCELOCK_REPLY_KIND_GRANTED &&
        replies[2].token == 1);
  CHECK(replies[3].kind == FENCELOCK_REPLY_KIND_QUEUED && replies[3].position == 1);
  CHECK(results[4] == FENCELOCK_RESULT_NOT_HOLDER && replies[4].kind == FENCELOCK_REPLY_KIND_NONE);
  CHECK(results[5] == FENCELOCK_RESULT_OK && replies[5].kind == FENCELOCK_REPLY_KIND_RELEASED &&
        replies[5].token == 1 && replies[5].pending == 1);
  char msg[128];
  OK(fencelock_service_last_error(svc, msg, sizeof msg, NULL));
  CHECK(strstr(msg, "holder") != NULL); /* the refused op */
  fencelock_output outs[4];
  CHECK(drain(svc, outs, 4) == 1);
  CHECK(is_event(&outs[0], FENCELOCK_OUTPUT_KIND_GRANTED, 2, job, 2));

  /* The same inputs one call at a time: the same state, byte for byte. */
  open_session(twin, 0, 10);
  open_session(twin, 0, 10);
  OK(fencelock_service_acquire(twin, 0, 1, S(job), FENCELOCK_MODE_EXCLUSIVE, FENCELOCK_WAIT_NONE,
                               0, 0, &r));
  OK(fencelock_service_acquire(twin, 0, 2, S(job), FENCELOCK_MODE_EXCLUSIVE,
                               FENCELOCK_WAIT_FOREVER, 0, 1, &r));
  EXPECT(fencelock_service_release(twin, 0, 2, S(job), 0, &r), FENCELOCK_RESULT_NOT_HOLDER);
  OK(fencelock_service_release(twin, 0, 1, S(job), 0, &r));
  CHECK(drain(twin, outs, 4) == 1);
  size_t len = 0;
  uint8_t *snap = snapshot(twin, &len);
  CHECK(unchanged(svc, snap, len));

  /* A now behind the service's stops the batch at its first op; nothing changes. */
  fencelock_op late = {.kind = FENCELOCK_OP_KIND_KEEP_ALIVE, .session = 2};
  EXPECT(fencelock_service_submit(svc, 0, &late, 1, replies, results, &done), FENCELOCK_RESULT_OK);
  EXPECT(fencelock_service_tick(svc, 5), FENCELOCK_RESULT_OK);
  size_t at5_len = 0;
  uint8_t *at5 = snapshot(svc, &at5_len);
  EXPECT(fencelock_service_submit(svc, 4, &late, 1, replies, results, &done),
         FENCELOCK_RESULT_TIME_WENT_BACKWARDS);
  CHECK(done == 0 && results[0] == FENCELOCK_RESULT_TIME_WENT_BACKWARDS);
  CHECK(unchanged(svc, at5, at5_len));
  free(at5);
  /* Bad arguments of the batch itself. */
  EXPECT(fencelock_service_submit(svc, 5, NULL, 1, replies, results, &done),
         FENCELOCK_RESULT_NULL_PARAMETER);
  EXPECT(fencelock_service_submit(svc, 5, ops, 1, replies, results, NULL),
         FENCELOCK_RESULT_NULL_PARAMETER);
  OK(fencelock_service_submit(svc, 5, NULL, 0, NULL, NULL, &done));
  CHECK(done == 0);
  free(snap);
  fencelock_service_free(svc);
  fencelock_service_free(twin);
}

int main(void) {
  gc_pause_timeline();
  refused_after_the_advance();
  frames();
  elections_and_lock_delay();
  bad_input();
  messages();
  placed();
  wrong_handles();
  heap_event_limit();
  drain_events_in_one_call();
  semaphores_labels_and_watches();
  batches();
  release_hold();
  printf("story.c: %d checks, %d passed, %d failed\n", checks, checks - failures, failures);
  return failures ? 1 : 0;
}
