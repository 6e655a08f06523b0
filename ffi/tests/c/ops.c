/* Instruction counts of the C ABI under callgrind (scripts/bench-ffi-ops.sh): the same
 * workloads as benches/src/lib.rs (`Uncontended`, `Handoff`), driven from C the way a C
 * host drives the library: each input, its reply read from the out-parameter, then its
 * events drained — with fencelock_service_poll_output until DONE (one call per event
 * plus one: _poll), with one fencelock_service_drain_events call into an array after
 * every input (_drain), or with that call only when the reply's `pending` is not 0
 * (_pending); or BATCH inputs at a time through fencelock_service_submit, each batch's
 * replies and results read, its events drained when the last reply's `pending` is not 0
 * (_batch: the ops are filled in by the measured host, names' strlen included).
 *
 * Usage: ops <workload> <size> <reps>, workload uncontended_{poll,drain,pending,batch}
 * (size = locks) or handoff_{poll,drain,pending,batch} (size = waiters per rep).
 * Only the functions named run_* are measured (callgrind --toggle-collect=run_*); the
 * script runs two repetition counts and divides the difference, which cancels setup. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fencelock.h"

#define FOREVER_TTL ((uint64_t)1 << 40)

/* Inputs per fencelock_service_submit call in the _batch workloads. */
#define BATCH 64

static fencelock_reply reply;
static fencelock_op ops[BATCH];
static fencelock_reply replies[BATCH];
static fencelock_result results[BATCH];
static fencelock_output events[64];
_Static_assert(BATCH <= sizeof events / sizeof events[0], "a batch's events fit the array");
static volatile uint64_t seen; /* keeps every read of a reply or event */

static void die(const char *what, fencelock_result r) {
  fprintf(stderr, "ops: %s failed with %u\n", what, (unsigned)r);
  exit(1);
}

static void drain_poll(fencelock_service *svc) {
  fencelock_output o;
  while (fencelock_service_poll_output(svc, &o) == FENCELOCK_RESULT_OK) seen += o.token;
}

/* The reply says how many events are queued: drain only when there are some. The
 * array's own length is the capacity (all or nothing: more than fit is BUFFER_TOO_SMALL,
 * and the run dies rather than have the library write past the array). */
static void drain_pending(fencelock_service *svc) {
  if (reply.pending == 0) return;
  size_t n = 0;
  fencelock_result r =
      fencelock_service_drain_events(svc, events, sizeof events / sizeof events[0], &n);
  if (r != FENCELOCK_RESULT_OK) die("drain_events", r);
  for (size_t i = 0; i < n; i++) seen += events[i].token;
}

static void drain_array(fencelock_service *svc) {
  size_t n = 0;
  fencelock_result r = fencelock_service_drain_events(svc, events, 64, &n);
  if (r != FENCELOCK_RESULT_OK) die("drain_events", r);
  for (size_t i = 0; i < n; i++) seen += events[i].token;
}

static fencelock_service *service(uint32_t sessions, uint32_t locks, uint32_t claims) {
  fencelock_config cfg = {.capacity = {.sessions = sessions, .locks = locks, .claims = claims},
                          .lock_delay = 0, .max_name_len = FENCELOCK_MAX_NAME_LEN};
  fencelock_service *svc = NULL;
  fencelock_result r = fencelock_service_new(&cfg, &svc);
  if (r != FENCELOCK_RESULT_OK) die("service_new", r);
  return svc;
}

static uint64_t open_session(fencelock_service *svc) {
  fencelock_result r = fencelock_service_open_session(svc, 0, FOREVER_TTL, &reply);
  if (r != FENCELOCK_RESULT_OK) die("open_session", r);
  drain_poll(svc);
  return reply.session;
}

/* `lock/00000042`, 13 bytes, as benches/src/lib.rs names them (n < 10^8). */
static char (*names(size_t n))[16] {
  char(*v)[16] = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++)
    snprintf(v[i], sizeof v[i], "lock/%08u", (unsigned)(i % 100000000u));
  return v;
}

static fencelock_result acquire(fencelock_service *svc, uint64_t s, const char *name,
                                fencelock_wait wait) {
  return fencelock_service_acquire(svc, 0, s, (const uint8_t *)name, strlen(name),
                                   FENCELOCK_MODE_EXCLUSIVE, wait, 0, 0, &reply);
}

static fencelock_result release(fencelock_service *svc, uint64_t s, const char *name) {
  return fencelock_service_release(svc, 0, s, (const uint8_t *)name, strlen(name), 0, &reply);
}

/* One session acquires n free locks, then releases them: n acquire + release pairs. */
#define UNCONTENDED(suffix, drain)                                          \
  __attribute__((noinline)) void run_uncontended_##suffix(                  \
      fencelock_service *svc, uint64_t s, char (*v)[16], size_t n) {        \
    for (size_t i = 0; i < n; i++) {                                        \
      if (acquire(svc, s, v[i], FENCELOCK_WAIT_NONE) != FENCELOCK_RESULT_OK) \
        die("acquire", 0);                                                  \
      seen += reply.token;                                                  \
      drain(svc);                                                           \
    }                                                                       \
    for (size_t i = 0; i < n; i++) {                                        \
      if (release(svc, s, v[i]) != FENCELOCK_RESULT_OK) die("release", 0);  \
      seen += reply.token;                                                  \
      drain(svc);                                                           \
    }                                                                       \
  }
UNCONTENDED(poll, drain_poll)
UNCONTENDED(drain, drain_array)
UNCONTENDED(pending, drain_pending)

/* One lock, a holder and n waiters: n releases, each granting the next waiter (the
 * release's reply to the caller, one Granted event to the waiter). */
#define HANDOFF(suffix, drain)                                              \
  __attribute__((noinline)) void run_handoff_##suffix(                      \
      fencelock_service *svc, const uint64_t *ids, size_t n) {              \
    for (size_t i = 0; i < n; i++) {                                        \
      if (release(svc, ids[i], "jobs/reindex") != FENCELOCK_RESULT_OK)      \
        die("release", 0);                                                  \
      seen += reply.token;                                                  \
      drain(svc);                                                           \
    }                                                                       \
  }
HANDOFF(poll, drain_poll)
HANDOFF(drain, drain_array)
HANDOFF(pending, drain_pending)

/* Submits ops[0..n] and reads what came back: every result must be OK; the events are
 * drained once, when the last reply says some are queued. */
static void submit(fencelock_service *svc, size_t n) {
  size_t done = 0;
  fencelock_result r = fencelock_service_submit(svc, 0, ops, n, replies, results, &done);
  if (r != FENCELOCK_RESULT_OK || done != n) die("submit", r);
  for (size_t i = 0; i < n; i++) {
    if (results[i] != FENCELOCK_RESULT_OK) die("an op of the batch", results[i]);
    seen += replies[i].token;
  }
  reply = replies[n - 1];
  drain_pending(svc);
}

static void op(size_t i, fencelock_op_kind kind, uint64_t s, const char *name) {
  ops[i] = (fencelock_op){.kind = kind,
                          .mode = FENCELOCK_MODE_EXCLUSIVE,
                          .wait = FENCELOCK_WAIT_NONE,
                          .session = s,
                          .lock = (const uint8_t *)name,
                          .lock_len = strlen(name)};
}

/* As run_uncontended_*, BATCH acquires (then releases) per call. */
__attribute__((noinline)) void run_uncontended_batch(fencelock_service *svc, uint64_t s,
                                                     char (*v)[16], size_t n) {
  for (int releasing = 0; releasing < 2; releasing++)
    for (size_t at = 0; at < n; at += BATCH) {
      size_t k = n - at < BATCH ? n - at : BATCH;
      for (size_t i = 0; i < k; i++)
        op(i, releasing ? FENCELOCK_OP_KIND_RELEASE : FENCELOCK_OP_KIND_ACQUIRE, s, v[at + i]);
      submit(svc, k);
    }
}

/* As run_handoff_*, BATCH releases per call (each grants the next waiter). */
__attribute__((noinline)) void run_handoff_batch(fencelock_service *svc, const uint64_t *ids,
                                                 size_t n) {
  for (size_t at = 0; at < n; at += BATCH) {
    size_t k = n - at < BATCH ? n - at : BATCH;
    for (size_t i = 0; i < k; i++) op(i, FENCELOCK_OP_KIND_RELEASE, ids[at + i], "jobs/reindex");
    submit(svc, k);
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: ops <workload> <size> <reps>\n");
    return 2;
  }
  const char *w = argv[1];
  size_t n = strtoul(argv[2], NULL, 10), reps = strtoul(argv[3], NULL, 10);
  int drain = strstr(w, "_drain") != NULL     ? 1
              : strstr(w, "_pending") != NULL ? 2
              : strstr(w, "_batch") != NULL   ? 3
                                              : 0;
  if (strncmp(w, "uncontended_", 12) == 0) {
    fencelock_service *svc = service(1, (uint32_t)n, (uint32_t)n);
    uint64_t s = open_session(svc);
    char(*v)[16] = names(n);
    for (size_t r = 0; r < reps; r++)
      drain == 3   ? run_uncontended_batch(svc, s, v, n)
      : drain == 2 ? run_uncontended_pending(svc, s, v, n)
      : drain == 1 ? run_uncontended_drain(svc, s, v, n)
                   : run_uncontended_poll(svc, s, v, n);
    free(v);
    fencelock_service_free(svc);
  } else if (strncmp(w, "handoff_", 8) == 0) {
    fencelock_service *svc = service((uint32_t)n + 1, 1, (uint32_t)n + 1);
    uint64_t *ids = malloc((n + 1) * sizeof *ids);
    for (size_t i = 0; i <= n; i++) ids[i] = open_session(svc);
    for (size_t r = 0; r < reps; r++) {
      for (size_t i = 0; i <= n; i++) /* ids[0] holds, the rest queue: not measured */
        if (acquire(svc, ids[i], "jobs/reindex", FENCELOCK_WAIT_FOREVER) != FENCELOCK_RESULT_OK)
          die("prepare", 0);
      drain_poll(svc);
      drain == 3   ? run_handoff_batch(svc, ids, n)
      : drain == 2 ? run_handoff_pending(svc, ids, n)
      : drain == 1 ? run_handoff_drain(svc, ids, n)
                   : run_handoff_poll(svc, ids, n);
      if (release(svc, ids[n], "jobs/reindex") != FENCELOCK_RESULT_OK) die("finish", 0);
      drain_poll(svc);
    }
    free(ids);
    fencelock_service_free(svc);
  } else {
    fprintf(stderr, "unknown workload %s\n", w);
    return 2;
  }
  return 0;
}
