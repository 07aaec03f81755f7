// The allocation-mix workload of the benchmark suite (scripts/bench): malloc, calloc, realloc
// and free with sizes 16..4096 bytes over a working set of about 10,000 live blocks per thread,
// each call made at the end of a call chain about 12 frames deep (so a stack walk has real work),
// from one of eight distinct chains (so deduplicated backtraces are few but not one).
//
// Usage: alloc_mix [THREADS [CALLS [times]]]   (defaults: 1 thread, 5,000,000 calls split over
// threads). Prints a checksum so the work cannot be optimised away, and with `times` a second
// line "work_s W cpu_s C": the wall and process CPU seconds of the threads' work alone, so that
// a runner's own start-up (bwrap, a log capture) does not blur a comparison (scripts/bench-android).
// The exit status is 0 on success.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIVE 16384  // slots; about 60% are occupied at any time
#define DEPTH 11

struct worker {
  uint64_t rng;
  long calls;
  void* slots[LIVE];
  size_t sizes[LIVE];
  uint64_t checksum;
};

static uint64_t next(struct worker* w) {
  // xorshift64*: cheap, deterministic per thread.
  w->rng ^= w->rng >> 12;
  w->rng ^= w->rng << 25;
  w->rng ^= w->rng >> 27;
  return w->rng * 2685821657736338717ULL;
}

static size_t pick_size(struct worker* w) {
  // Mostly small, sometimes up to 4 KiB, as typical heaps are.
  uint64_t r = next(w);
  return (r & 3) ? 16 + (r >> 8) % 240 : 16 + (r >> 8) % 4081;
}

// One operation on slot i: allocate into an empty slot, else realloc or free it.
__attribute__((noinline)) static void operate(struct worker* w, unsigned i) {
  uint64_t r = next(w);
  void* p = w->slots[i];
  if (p == NULL) {
    size_t n = pick_size(w);
    if (r % 4 == 0) {
      p = calloc(1, n);
    } else {
      p = malloc(n);
      if (p) memset(p, (int)i, n < 64 ? n : 64);
    }
    w->slots[i] = p;
    w->sizes[i] = p ? n : 0;
  } else if (r % 3 == 0) {
    size_t n = pick_size(w);
    void* q = realloc(p, n);
    if (q) {
      w->slots[i] = q;
      w->sizes[i] = n;
    }
  } else {
    w->checksum += ((unsigned char*)p)[0] + w->sizes[i];
    free(p);
    w->slots[i] = NULL;
  }
}

// The call chain: depth frames of real calls above `operate` (noinline, not tail calls).
#define CHAIN(name)                                                              \
  __attribute__((noinline)) static void name(struct worker* w, unsigned i, int d) { \
    if (d == 0) {                                                                \
      operate(w, i);                                                             \
    } else {                                                                     \
      name(w, i, d - 1);                                                         \
    }                                                                            \
    __asm__ volatile("" ::: "memory");                                           \
  }
CHAIN(chain0)
CHAIN(chain1)
CHAIN(chain2)
CHAIN(chain3)
CHAIN(chain4)
CHAIN(chain5)
CHAIN(chain6)
CHAIN(chain7)
static void (*const chains[8])(struct worker*, unsigned, int) = {
    chain0, chain1, chain2, chain3, chain4, chain5, chain6, chain7};

static void* run(void* arg) {
  struct worker* w = arg;
  for (long c = 0; c < w->calls; c++) {
    uint64_t r = next(w);
    chains[r & 7](w, (unsigned)((r >> 3) % LIVE), DEPTH - 2);
  }
  for (unsigned i = 0; i < LIVE; i++) free(w->slots[i]);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  long calls = argc > 2 ? atol(argv[2]) : 5000000L;
  if (threads < 1 || threads > 64 || calls < 1) {
    fprintf(stderr, "usage: alloc_mix [THREADS [CALLS [times]]]\n");
    return 2;
  }
  int times = argc > 3 && strcmp(argv[3], "times") == 0;
  struct timespec wall0, cpu0, wall1, cpu1;
  clock_gettime(CLOCK_MONOTONIC, &wall0);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
  struct worker* w = calloc((size_t)threads, sizeof *w);
  pthread_t* t = calloc((size_t)threads, sizeof *t);
  for (int i = 0; i < threads; i++) {
    w[i].rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1);
    w[i].calls = calls / threads;
    pthread_create(&t[i], NULL, run, &w[i]);
  }
  uint64_t sum = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    sum += w[i].checksum;
  }
  clock_gettime(CLOCK_MONOTONIC, &wall1);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
  printf("checksum %llu\n", (unsigned long long)sum);
  if (times) {
    printf("work_s %.6f cpu_s %.6f\n",
           (double)(wall1.tv_sec - wall0.tv_sec) + (wall1.tv_nsec - wall0.tv_nsec) / 1e9,
           (double)(cpu1.tv_sec - cpu0.tv_sec) + (cpu1.tv_nsec - cpu0.tv_nsec) / 1e9);
  }
  free(w);
  free(t);
  return 0;
}
