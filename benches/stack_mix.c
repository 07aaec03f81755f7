// The second allocation mix of the benchmark suite (scripts/bench, workloads stacks1 and
// stacks2), written apart from benches/alloc_mix.c so that results do not depend on one
// workload's shape (issue 25): many distinct call stacks and a wide spread of sizes.
//
// - Sizes are log-uniform over 16..4096 bytes (as many blocks of 16..32 bytes as of 2048..4096).
// - About 10,000 blocks are live per thread: 16,384 slots, of which about 60% are occupied.
// - Every call is made at the bottom of a 12-frame chain whose shape depends on six random
//   bits: level d of the chain runs in one of two noinline frame functions, chosen by bit
//   (d mod 6), so there are 64 distinct stacks of return addresses, and the two functions
//   alternate along a chain in a pattern that changes from call to call.
// - The memory is used: every cache line of a new block is written, and a block's first byte
//   is read before it is freed.
//
// Usage: stack_mix [THREADS [CALLS]]   (defaults: 1 thread, 5,000,000 calls split over threads)
// Prints a checksum so the work cannot be optimised away; the exit status is 0 on success.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE 16384    // slots; about 60% are occupied at any time
#define DEPTH 12      // frames of the chain above the allocation call
#define SHAPE_BITS 6  // 2^6 = 64 distinct stacks
#define SIZES 4096    // the log-uniform size table

static size_t sizes[SIZES];

// 2^x for x >= 0 without libm: the integer part by shifting, the fraction by its series.
static double exp2_(double x) {
  int whole = (int)x;
  double y = (x - whole) * 0.6931471805599453, term = 1, sum = 1;
  for (int n = 1; n < 16; n++) sum += term *= y / n;
  return sum * (double)(1ULL << whole);
}

struct worker {
  uint64_t rng;
  long calls;
  void* slots[LIVE];
  size_t lens[LIVE];
  uint64_t checksum;
};

static uint64_t next(struct worker* w) {
  // xorshift64*: cheap, deterministic per thread.
  w->rng ^= w->rng >> 12;
  w->rng ^= w->rng << 25;
  w->rng ^= w->rng >> 27;
  return w->rng * 2685821657736338717ULL;
}

static void touch(unsigned char* p, size_t n, unsigned v) {
  for (size_t k = 0; k < n; k += 64) p[k] = (unsigned char)(v + k);
  p[n - 1] = (unsigned char)v;
}

// One operation on slot i: allocate into an empty slot, else realloc (a third) or free it.
__attribute__((noinline)) static void operate(struct worker* w, unsigned i) {
  uint64_t r = next(w);
  void* p = w->slots[i];
  size_t n = sizes[(r >> 32) % SIZES];
  if (p == NULL) {
    p = r % 4 == 0 ? calloc(1, n) : malloc(n);
    if (p) touch(p, n, i);
    w->slots[i] = p;
    w->lens[i] = p ? n : 0;
  } else if ((r >> 2) % 3 == 0) {
    void* q = realloc(p, n);
    if (q) {
      if (n > w->lens[i]) touch((unsigned char*)q + w->lens[i], n - w->lens[i], i);
      w->slots[i] = q;
      w->lens[i] = n;
    }
  } else {
    w->checksum += ((unsigned char*)p)[0] + w->lens[i];
    free(p);
    w->slots[i] = NULL;
  }
}

// The two frame functions. Each calls the next level through `frame_fns`, so a frame's return
// address depends only on which of the two it is; level `d` picks by bit (d mod SHAPE_BITS).
typedef void (*frame_fn)(struct worker*, unsigned, uint64_t, int);
static frame_fn frame_fns[2];

#define FRAME(name)                                                                       \
  __attribute__((noinline)) static void name(struct worker* w, unsigned i, uint64_t r, int d) { \
    if (d == 0) {                                                                         \
      operate(w, i);                                                                      \
    } else {                                                                              \
      frame_fns[(r >> (d % SHAPE_BITS)) & 1](w, i, r, d - 1);                             \
    }                                                                                     \
    __asm__ volatile("" ::: "memory"); /* not a tail call */                              \
  }
FRAME(frame_a)
FRAME(frame_b)

static void* run(void* arg) {
  struct worker* w = arg;
  for (long c = 0; c < w->calls; c++) {
    uint64_t r = next(w);
    frame_fns[r & 1](w, (unsigned)((r >> 16) % LIVE), r, DEPTH - 1);
  }
  for (unsigned i = 0; i < LIVE; i++) free(w->slots[i]);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  long calls = argc > 2 ? atol(argv[2]) : 5000000L;
  if (threads < 1 || threads > 64 || calls < 1) {
    fprintf(stderr, "usage: stack_mix [THREADS [CALLS]]\n");
    return 2;
  }
  frame_fns[0] = frame_a;
  frame_fns[1] = frame_b;
  // 2^(4 + 8u) for u uniform in [0, 1): log-uniform over 16..4096.
  for (int k = 0; k < SIZES; k++) sizes[k] = (size_t)exp2_(4.0 + 8.0 * (k + 0.5) / SIZES);
  struct worker* w = calloc((size_t)threads, sizeof *w);
  pthread_t* t = calloc((size_t)threads, sizeof *t);
  if (!w || !t) return 3;
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
  printf("checksum %llu\n", (unsigned long long)sum);
  free(w);
  free(t);
  return 0;
}
