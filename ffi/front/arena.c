/* The bootstrap arena (front.c's header comment, "Bootstrap") and the allocation paths that
 * use it before the table is known. */
#include "front.h"

/* ------------------------------------------------------------------------------------------ */
/* Bootstrap arena.                                                                           */
/* ------------------------------------------------------------------------------------------ */

#define ARENA_HEADER 16
#define ARENA_MAGIC ((size_t)0x6d64626f6f747374ULL) /* "mdbootst" */

unsigned char g_arena[ARENA_SIZE] __attribute__((aligned(4096)));
static size_t g_arena_used; /* atomic; bump offset */

/* A fresh, zero-filled block of `size` bytes aligned to `align` (a power of two), or NULL when
 * the arena is used up to `limit`. The block's size is recorded in the 16 bytes before it. */
static void* arena_alloc(size_t align, size_t size, size_t limit) {
  if (align < 16) align = 16;
  if (size > ARENA_SIZE || align > ARENA_SIZE / 2) return NULL;
  size_t used = __atomic_load_n(&g_arena_used, __ATOMIC_RELAXED);
  for (;;) {
    size_t start = (used + ARENA_HEADER + align - 1) & ~(align - 1);
    size_t end = (start + size + 15) & ~(size_t)15;
    if (end > limit || end < start) return NULL;
    if (__atomic_compare_exchange_n(&g_arena_used, &used, end, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      size_t* header = (size_t*)(void*)(g_arena + start - ARENA_HEADER);
      header[0] = size;
      header[1] = ARENA_MAGIC;
      return g_arena + start;
    }
  }
}

size_t arena_size(const void* p) {
  const size_t* header = (const size_t*)((const unsigned char*)p - ARENA_HEADER);
  if ((uintptr_t)p - (uintptr_t)g_arena < ARENA_HEADER || header[1] != ARENA_MAGIC) return 0;
  return header[0];
}

/* ------------------------------------------------------------------------------------------ */
/* Bootstrap-time allocation.                                                                 */
/* ------------------------------------------------------------------------------------------ */

static size_t round_up_pow2(size_t v) {
  size_t p = 16;
  while (p < v && p != 0) p <<= 1;
  return p;
}

/* Threads other than the bootstrapping one may use only half of the arena before they wait, so
 * that they cannot starve the bootstrap itself (dlopen failing for lack of memory). */
static size_t arena_limit(void) {
  if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != STATE_INITIALIZING ||
      __atomic_load_n(&g_init_tid, __ATOMIC_RELAXED) == syscall(SYS_gettid)) {
    return ARENA_SIZE;
  }
  return ARENA_SIZE / 2;
}

void* early_memalign(size_t align, size_t size) {
  void* p = arena_alloc(round_up_pow2(align), size, arena_limit());
  if (p != NULL) return p;
  const MallocDispatch17* t = wait_for_table();
  if (t != NULL) return t->memalign(align, size);
  errno = ENOMEM;
  return NULL;
}

void* early_malloc(size_t size) {
  void* p = arena_alloc(16, size, arena_limit());
  if (p != NULL) return p;
  const MallocDispatch17* t = wait_for_table();
  if (t != NULL) return t->malloc(size);
  errno = ENOMEM;
  return NULL;
}

void* do_malloc(size_t size) {
  const MallocDispatch17* t = table();
  return t != NULL ? t->malloc(size) : early_malloc(size);
}

size_t page_size(void) {
  static size_t cached;
  size_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v == 0) {
    long s = sysconf(_SC_PAGESIZE);
    v = s > 0 ? (size_t)s : 4096;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}
