/*
 * Conformance runner: replays the tests/vectors files through the C ABI's frame entry point
 * (fencelock_service_handle_frame) and compares every output frame, refusal code and
 * snapshot byte for byte. Usage: vectors FILE.vec...  Exit status 1 on any mismatch.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fencelock.h"

static const char *file;
static long line_no;
static int failures, inputs, outputs, snapshots;

static void fail(const char *what) {
  failures++;
  fprintf(stderr, "%s:%ld: %s\n", file, line_no, what);
}

/* Decodes hex text into a malloc'd buffer; returns its length, or -1 if not hex. */
static long unhex(const char *text, uint8_t **out) {
  size_t n = strlen(text);
  if (n % 2) return -1;
  *out = malloc(n / 2 + 1);
  for (size_t i = 0; i < n / 2; i++) {
    unsigned v;
    if (sscanf(text + 2 * i, "%2x", &v) != 1) return -1;
    (*out)[i] = (uint8_t)v;
  }
  return (long)(n / 2);
}

/* What the last `in` produced, consumed by the `out` / `err` lines after it. */
static struct {
  int active;
  fencelock_result code;
  uint8_t *frames;
  size_t len, pos;
  int err_seen;
} last;

static void settle(void) {
  if (!last.active) return;
  if (last.code == FENCELOCK_RESULT_OK && last.pos != last.len)
    fail("the input produced more outputs than the vector lists");
  if (last.code != FENCELOCK_RESULT_OK && !last.err_seen) {
    char m[160];
    fencelock_result_message(last.code, m, sizeof m, NULL);
    fprintf(stderr, "%s:%ld: input refused with %u (%s), vector expects success\n", file,
            line_no, (unsigned)last.code, m);
    failures++;
  }
  last.active = 0;
}

static unsigned long field(const char *cfg, const char *key) {
  const char *p = strstr(cfg, key);
  if (!p) {
    fail("config lacks a field");
    return 0;
  }
  return strtoul(p + strlen(key), NULL, 10);
}

static void run(FILE *f) {
  fencelock_service *svc = NULL;
  uint8_t *buf = NULL;
  size_t cap = 0;
  char *text = NULL;
  size_t text_cap = 0;
  ssize_t n;
  line_no = 0;
  while ((n = getline(&text, &text_cap, f)) >= 0) {
    line_no++;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) text[--n] = 0;
    if (n == 0 || text[0] == '#') continue;
    if (strncmp(text, "config ", 7) == 0) {
      settle();
      fencelock_service_free(svc);
      svc = NULL;
      fencelock_config c;
      c.capacity.sessions = (uint32_t)field(text, "sessions=");
      c.capacity.locks = (uint32_t)field(text, "locks=");
      c.capacity.claims = (uint32_t)field(text, "claims=");
      c.lock_delay = field(text, "lock_delay=");
      c.max_name_len = (uint32_t)field(text, "max_name_len=");
      if (fencelock_service_new(&c, &svc) != FENCELOCK_RESULT_OK) fail("config refused");
      /* Room for the most outputs one input can emit. */
      cap = ((size_t)c.capacity.sessions + 2 * (size_t)c.capacity.claims + 1) *
            (FENCELOCK_FRAME_PREFIX_LEN + FENCELOCK_MAX_FRAME_LEN);
      free(buf);
      buf = malloc(cap);
    } else if (strncmp(text, "in", 2) == 0 && (text[2] == ' ' || text[2] == 0)) {
      settle();
      uint8_t *frame = NULL;
      long len = unhex(text[2] ? text + 3 : "", &frame);
      if (len < 0 || !svc) {
        fail(svc ? "bad hex" : "in before config");
        free(frame);
        continue;
      }
      size_t written = 0;
      /* A non-NULL pointer even for the empty frame, so the empty frame is what is judged. */
      uint8_t empty = 0;
      last.code = fencelock_service_handle_frame(svc, len ? frame : &empty, (size_t)len, buf,
                                                 cap, &written);
      if (last.code == FENCELOCK_RESULT_BUFFER_TOO_SMALL) fail("output buffer too small");
      last.active = 1;
      last.frames = buf;
      last.len = last.code == FENCELOCK_RESULT_OK ? written : 0;
      last.pos = 0;
      last.err_seen = 0;
      inputs++;
      free(frame);
    } else if (strncmp(text, "out ", 4) == 0) {
      uint8_t *want = NULL;
      long len = unhex(text + 4, &want);
      outputs++;
      if (!last.active || last.code != FENCELOCK_RESULT_OK) {
        fail("vector expects an output, but the input was refused (or there was no input)");
      } else if (last.pos + 2 > last.len) {
        fail("vector expects an output the input did not produce");
      } else {
        size_t flen = last.frames[last.pos] | (size_t)last.frames[last.pos + 1] << 8;
        if ((long)flen != len || last.pos + 2 + flen > last.len ||
            memcmp(last.frames + last.pos + 2, want, flen) != 0)
          fail("output frame differs");
        last.pos += 2 + flen;
      }
      free(want);
    } else if (strncmp(text, "err ", 4) == 0) {
      unsigned long code = strtoul(text + 4, NULL, 10);
      if (!last.active) fail("err without in");
      else if ((unsigned long)last.code != code) {
        char m[200];
        snprintf(m, sizeof m, "refusal code %u, vector expects %lu", (unsigned)last.code, code);
        fail(m);
      }
      last.err_seen = 1;
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
    } else {
      fail("unknown directive");
    }
  }
  settle();
  free(text);
  free(buf);
  fencelock_service_free(svc);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE.vec...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    file = argv[i];
    FILE *f = fopen(file, "r");
    if (!f) {
      perror(file);
      failures++;
      continue;
    }
    run(f);
    fclose(f);
  }
  printf("vectors.c: %d files, %d inputs, %d outputs, %d snapshots replayed, %d failed\n",
         argc - 1, inputs, outputs, snapshots, failures);
  return failures ? 1 : 0;
}
