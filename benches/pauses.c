// Allocation latency while backtrace records are collected (scripts/bench --workloads pauses).
// Phase 1 (not timed) makes HELD live blocks from HELD_STACKS distinct call paths and keeps them.
// Phase 2 times CALLS malloc+free pairs of short-lived blocks, each from one of CHURN_STACKS
// other call paths in turn: under `backtrace` every new path is a new record, and the records of
// paths no live block uses any more are what a collection frees, holding the live table while it
// scans it. Prints the latency distribution of phase 2's pairs and their total.
// Usage: pauses HELD HELD_STACKS CHURN_STACKS CALLS [cpu]
// With "cpu", each pair is timed by the thread's CPU clock instead of the monotonic clock: the
// time the thread spent working, without the time the scheduler gave other programs (on a
// shared machine those dominate the longest pairs), at the price of a dearer clock read.
// Prints "pairs N total_s S p50_ns A p99_ns B p999_ns C max_us D over_1ms E".
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// Distinct call paths: a path id picks, two bits per level, which of four functions calls the
// next level, so each id is a different chain of return addresses (LEVELS levels: 4^LEVELS
// paths, all within the 16 frames `backtrace` captures by default).
#define LEVELS 10
typedef void* (*level_fn)(int depth, uint32_t path, size_t size);
static level_fn levels[4];

#define LEVEL(k)                                                                      \
  __attribute__((noinline)) static void* level##k(int depth, uint32_t path, size_t size) { \
    void* p = depth == 0 ? malloc(size) : levels[path & 3](depth - 1, path >> 2, size);   \
    __asm__ volatile("" : : "r"(p) : "memory");                                           \
    return p;                                                                             \
  }
LEVEL(0)
LEVEL(1)
LEVEL(2)
LEVEL(3)

static void* alloc_on_path(uint32_t path, size_t size) { return levels[0](LEVELS, path, size); }

static clockid_t pair_clock = CLOCK_MONOTONIC;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(pair_clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int by_value(const void* a, const void* b) {
  uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && strcmp(argv[5], "cpu") == 0)) {
    fprintf(stderr, "usage: pauses HELD HELD_STACKS CHURN_STACKS CALLS [cpu]\n");
    return 2;
  }
  if (argc == 6) pair_clock = CLOCK_THREAD_CPUTIME_ID;
  long held = atol(argv[1]), held_stacks = atol(argv[2]), churn_stacks = atol(argv[3]);
  long calls = atol(argv[4]);
  if (held < 0 || held_stacks < 1 || churn_stacks < 1 || calls < 1 ||
      held_stacks + churn_stacks > (1L << (2 * LEVELS))) {
    fprintf(stderr, "pauses: bad arguments\n");
    return 2;
  }
  levels[0] = level0;
  levels[1] = level1;
  levels[2] = level2;
  levels[3] = level3;
  void** blocks = malloc((size_t)(held ? held : 1) * sizeof *blocks);
  uint32_t* ns = malloc((size_t)calls * sizeof *ns);
  if (!blocks || !ns) return 3;
  for (long i = 0; i < held; i++) blocks[i] = alloc_on_path((uint32_t)(i % held_stacks), 32);
  uint64_t start = now_ns();
  for (long i = 0; i < calls; i++) {
    uint64_t t0 = now_ns();
    void* p = alloc_on_path((uint32_t)(held_stacks + i % churn_stacks), 48);
    free(p);
    uint64_t t = now_ns() - t0;
    ns[i] = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
  }
  double total = (now_ns() - start) / 1e9;
  qsort(ns, (size_t)calls, sizeof *ns, by_value);
  long over = 0;
  for (long i = 0; i < calls; i++) over += ns[i] > 1000000;
  printf("pairs %ld total_s %.3f p50_ns %u p99_ns %u p999_ns %u max_us %.0f over_1ms %ld\n", calls,
         total, ns[calls / 2], ns[calls * 99 / 100], ns[calls * 999 / 1000], ns[calls - 1] / 1e3,
         over);
  for (long i = 0; i < held; i++) free(blocks[i]);
  free(blocks);
  free(ns);
  return 0;
}
