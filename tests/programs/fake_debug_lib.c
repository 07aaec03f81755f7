// A stand-in for libc_malloc_debug.so that tests the front's side of the contract: it forwards
// every dispatch entry to the table it was given and reports what it saw.
//   -DOMIT_MALLOC_INFO   build without debug_malloc_info (a dispatch entry)
//   -DOMIT_FINALIZE      build without debug_finalize (a control function)
//   -DOMIT_REALLOCARRAY  build without debug_reallocarray (Android 17's dispatch entry)
// The front passes Android 17's table (MallocDispatch17), which this library expects.
// Options understood by debug_initialize: "fail" makes it return false; "early" checks the
// allocation its constructor made while the front was still bootstrapping.
// With FAKE_BOOTSTRAP_THREADS set in the environment, the constructor starts threads that
// allocate while the front is still bootstrapping (they exhaust its arena and must wait);
// fake_join_threads() reports their errors.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "malloc_debug.h"

#define EXPORT __attribute__((visibility("default")))

static const MallocDispatch17* g_dispatch;
static bool* g_zygote;
static unsigned char* g_early;
static size_t g_early_usable;
static unsigned char* g_early_zeroed;

static void say(const char* msg) {
  char buf[256];
  int n = snprintf(buf, sizeof(buf), "FAKE: %s\n", msg);
  if (write(2, buf, (size_t)n) < 0) {
  }
}

#define BOOTSTRAP_THREADS 4
static pthread_t g_threads[BOOTSTRAP_THREADS];
static int g_thread_count;
static long g_thread_errors;

static void* bootstrap_worker(void* arg) {
  (void)arg;
  long errors = 0;
  for (int i = 0; i < 3000; i++) {
    size_t n = 64 + (size_t)(i % 50) * 16;
    unsigned char fill = (unsigned char)i;
    unsigned char* p = malloc(n);
    if (p == NULL) {
      errors++;
      continue;
    }
    memset(p, fill, n);
    unsigned char* q = realloc(p, n * 2);
    if (q == NULL) {
      errors++;
      continue;
    }
    for (size_t j = 0; j < n; j++) errors += q[j] != fill;
    if (malloc_usable_size(q) < n * 2) errors++;
    free(q);
  }
  __atomic_add_fetch(&g_thread_errors, errors, __ATOMIC_RELAXED);
  return NULL;
}

// Runs inside the front's dlopen, i.e. while the front bootstraps: these come from its arena.
__attribute__((constructor)) static void fake_constructor(void) {
  g_early = malloc(100);
  if (g_early != NULL) memset(g_early, 0x5a, 100);
  g_early_usable = malloc_usable_size(g_early);
  g_early_zeroed = calloc(64, 1);
  free(malloc(10));
  if (getenv("FAKE_BOOTSTRAP_THREADS") != NULL) {
    for (int i = 0; i < BOOTSTRAP_THREADS; i++) {
      if (pthread_create(&g_threads[i], NULL, bootstrap_worker, NULL) == 0) g_thread_count++;
    }
  }
}

EXPORT bool debug_initialize(const MallocDispatch* dispatch, bool* zygote_child,
                             const char* options) {
  if (dispatch == NULL || zygote_child == NULL || options == NULL) return false;
  if (strstr(options, "fail") != NULL) return false;
  g_dispatch = (const MallocDispatch17*)dispatch;
  dispatch = NULL;  // only through g_dispatch, Android 17's layout
  g_zygote = zygote_child;
  // Give the constructor's threads time to exhaust the front's bootstrap arena: they must wait
  // for the table rather than fail.
  if (g_thread_count > 0) usleep(50000);
  char msg[200];
  snprintf(msg, sizeof(msg), "initialize options=%s zygote=%d", options, *zygote_child);
  say(msg);
  if (strstr(options, "early") != NULL) {
    bool ok = g_early != NULL && g_early_usable == 100 && g_early_zeroed != NULL;
    for (int i = 0; ok && i < 64; i++) ok = g_early_zeroed[i] == 0;
    snprintf(msg, sizeof(msg), "early usable=%zu ok=%d", g_early_usable, ok);
    say(msg);
  }
  // The native table is glibc's: memory from it can be used and returned.
  void* p = g_dispatch->reallocarray(NULL, 4, 8);
  bool native_ok = p != NULL && g_dispatch->malloc_usable_size(p) >= 32;
  g_dispatch->free(p);
  errno = 0;
  native_ok = native_ok && g_dispatch->reallocarray(NULL, SIZE_MAX, 2) == NULL && errno == ENOMEM;
  errno = 0;
  int it = g_dispatch->malloc_iterate(0, 0, NULL, NULL);
  snprintf(msg, sizeof(msg), "native ok=%d iterate=%d errno_enotsup=%d", native_ok, it,
           errno == ENOTSUP);
  say(msg);
  return true;
}

#if !defined(OMIT_FINALIZE)
EXPORT void debug_finalize(void) { say("finalize"); }
#endif

EXPORT void debug_dump_heap(const char* file_name) { (void)file_name; }

// One fake record: size 1234 (zygote bit when the zygote flag is set), 2 allocations, 3 frames.
EXPORT void debug_get_malloc_leak_info(uint8_t** info, size_t* overall_size, size_t* info_size,
                                       size_t* total_memory, size_t* backtrace_size) {
  size_t frames = 3;
  size_t one = 2 * sizeof(size_t) + frames * sizeof(uintptr_t);
  size_t* rec = g_dispatch->calloc(1, one);
  rec[0] = 1234 | (*g_zygote ? MALLOC_DEBUG_ZYGOTE_CHILD_ALLOCATION : 0);
  rec[1] = 2;
  rec[2] = 0x1000;
  rec[3] = 0x2000;
  rec[4] = 0x3000;
  *info = (uint8_t*)rec;
  *overall_size = one;
  *info_size = one;
  *total_memory = 2468;
  *backtrace_size = frames;
}

EXPORT void debug_free_malloc_leak_info(uint8_t* info) {
  say(info != NULL ? "free_malloc_leak_info buffer" : "free_malloc_leak_info null");
  g_dispatch->free(info);
}

EXPORT ssize_t debug_malloc_backtrace(void* pointer, uintptr_t* frames, size_t max_frames) {
  (void)pointer;
  for (size_t i = 0; i < max_frames && i < 2; i++) frames[i] = 0xabc0 + i;
  return max_frames < 2 ? (ssize_t)max_frames : 2;
}

EXPORT bool debug_write_malloc_leak_info(FILE* fp) {
  fflush(fp);
  dprintf(fileno(fp), "FAKE HEAP DUMP\n");
  return true;
}

EXPORT void* debug_malloc(size_t size) { return g_dispatch->malloc(size); }
EXPORT void debug_free(void* pointer) { g_dispatch->free(pointer); }
EXPORT void* debug_calloc(size_t nmemb, size_t bytes) { return g_dispatch->calloc(nmemb, bytes); }
EXPORT void* debug_realloc(void* pointer, size_t bytes) {
  return g_dispatch->realloc(pointer, bytes);
}
#if !defined(OMIT_REALLOCARRAY)
EXPORT void* debug_reallocarray(void* pointer, size_t nmemb, size_t size) {
  char msg[80];
  snprintf(msg, sizeof(msg), "reallocarray nmemb=%zu size=%zu", nmemb, size);
  say(msg);
  return g_dispatch->reallocarray(pointer, nmemb, size);
}
#endif
EXPORT void* debug_memalign(size_t alignment, size_t bytes) {
  return g_dispatch->memalign(alignment, bytes);
}
EXPORT int debug_posix_memalign(void** memptr, size_t alignment, size_t size) {
  return g_dispatch->posix_memalign(memptr, alignment, size);
}
EXPORT void* debug_aligned_alloc(size_t alignment, size_t size) {
  return g_dispatch->aligned_alloc(alignment, size);
}
EXPORT size_t debug_malloc_usable_size(void* pointer) {
  return g_dispatch->malloc_usable_size(pointer);
}
EXPORT MallocDebugMallinfo debug_mallinfo(void) { return g_dispatch->mallinfo(); }
EXPORT int debug_mallopt(int param, int value) { return g_dispatch->mallopt(param, value); }
#if !defined(OMIT_MALLOC_INFO)
EXPORT int debug_malloc_info(int options, FILE* fp) { return g_dispatch->malloc_info(options, fp); }
#endif
EXPORT int debug_malloc_iterate(uintptr_t base, size_t size,
                                void (*callback)(uintptr_t, size_t, void*), void* arg) {
  return g_dispatch->malloc_iterate(base, size, callback, arg);
}
EXPORT void debug_malloc_disable(void) { g_dispatch->malloc_disable(); }
EXPORT void debug_malloc_enable(void) { g_dispatch->malloc_enable(); }

// Not part of the contract: the errors of the threads the constructor started (-1: none ran).
EXPORT long fake_join_threads(void) {
  if (g_thread_count != BOOTSTRAP_THREADS) return -1;
  for (int i = 0; i < g_thread_count; i++) pthread_join(g_threads[i], NULL);
  return __atomic_load_n(&g_thread_errors, __ATOMIC_RELAXED);
}

// Not part of the contract: lets the probe check the bootstrap arena after initialisation.
EXPORT int fake_early_check(void) {
  unsigned char* p = realloc(g_early, 300);
  if (p == NULL || p == g_early) return 1;
  for (int i = 0; i < 100; i++) {
    if (p[i] != 0x5a) return 2;
  }
  free(p);
  free(g_early);  // an arena block: ignored
  free(g_early_zeroed);
  return 0;
}
