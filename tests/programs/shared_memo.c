/* Blocks allocated through different first frames under one shared caller: every call's
 * stack from `pick`'s call site up is the same, so the library's stack-walk memos
 * (src/backtrace/memo.rs) serve all six paths from one memo, and what it notes per memo (the interned backtrace,
 * src/backtrace/note.rs) must still be per path. Path k leaks ROUNDS blocks of size 1000 + k
 * allocated in leaf<k>; more paths than a memo keeps notes for. */
#include <stdlib.h>

#define ROUNDS 40
#define LEAF(k) \
  __attribute__((noinline)) void* leaf##k(void) { \
    void* p = malloc(1000 + k); \
    __asm__ volatile("" ::: "memory"); \
    return p; \
  }
LEAF(0)
LEAF(1)
LEAF(2)
LEAF(3)
LEAF(4)
LEAF(5)

/* One call site for every leaf: the walks of all six paths stand at the same return address
 * and stack pointer once they reach `pick`, where a memo starts. */
static void* (*const volatile leaves[6])(void) = {leaf0, leaf1, leaf2, leaf3, leaf4, leaf5};

__attribute__((noinline)) void* pick(int k) {
  void* p = leaves[k]();
  __asm__ volatile("" ::: "memory");
  return p;
}

/* "churn": 8,192 new distinct stacks a round (two frame functions chosen by the bits of
 * `path`) that allocate and free, enough for the library to collect unused backtrace records
 * every round; between rounds every path's block is freed too, so its record is collected and
 * the id noted for it must not be used again. */
static inline __attribute__((always_inline)) void branch_next(unsigned path, int depth);
static void* volatile churned;

__attribute__((noinline)) void branch_a(unsigned path, int depth) {
  branch_next(path, depth);
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void branch_b(unsigned path, int depth) {
  branch_next(path, depth);
  __asm__ volatile("" ::: "memory");
}

static inline __attribute__((always_inline)) void branch_next(unsigned path, int depth) {
  if (depth == 0) {
    churned = malloc(8);
    free(churned);
  } else if (path & 1) {
    branch_b(path >> 1, depth - 1);
  } else {
    branch_a(path >> 1, depth - 1);
  }
}

static void* volatile kept[ROUNDS * 6];
static int kept_count;

/* Every block, kept or freed, comes through this one call site of `pick`, and `step` is called
 * from one place: the churn rounds and the kept rounds replay the same memos. */
__attribute__((noinline)) void step(int k, int keep) {
  void* p = pick(k);
  if (keep) {
    kept[kept_count++] = p;
  } else {
    free(p);
  }
}

int main(int argc, char** argv) {
  int churn_rounds = argc > 1 ? 6 : 0;
  for (int r = 0; r < churn_rounds + ROUNDS; r++) {
    for (int k = 0; k < 6; k++) step(k, r >= churn_rounds);
    if (r >= churn_rounds) continue;
    for (unsigned path = 0; path < 8192; path++) branch_a(r * 8192 + path, 15);
    /* Allocations from one call site carry the running collection (a step at a time) to its
     * end: the paths' notes are now from an epoch before it, their records collected. */
    for (int i = 0; i < 200000; i++) {
      churned = malloc(8);
      free(churned);
    }
  }
  return 0;
}
