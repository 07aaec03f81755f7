// Bionic's side of the contract for test drivers: dlopen libc_malloc_debug.so, resolve every
// debug_ name (d_<name>), and initialize with glibc's allocator as the native MallocDispatch.
// Header-only so each test family keeps its own driver (tests/<family>/driver.c).
#pragma once
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "malloc_debug.h"

#define M_PURGE_ALL_VALUE (-104)

static int no_iterate(uintptr_t base, size_t size, void (*cb)(uintptr_t, size_t, void*), void* arg) {
  (void)base; (void)size; (void)cb; (void)arg;
  errno = ENOTSUP;
  return -1;
}
static void no_op(void) {}

static MallocDispatch native = {
    .calloc = calloc,
    .free = free,
    .mallinfo = mallinfo,
    .malloc = malloc,
    .malloc_usable_size = (size_t (*)(const void*))malloc_usable_size,
    .memalign = memalign,
    .posix_memalign = posix_memalign,
    .realloc = realloc,
    .malloc_iterate = no_iterate,
    .malloc_disable = no_op,
    .malloc_enable = no_op,
    .mallopt = mallopt,
    .aligned_alloc = aligned_alloc,
    .malloc_info = malloc_info,
};

// Android 17's table: glibc's reallocarray (2.26+) in the slot after realloc.
static MallocDispatch17 native17 = {
    .calloc = calloc,
    .free = free,
    .mallinfo = mallinfo,
    .malloc = malloc,
    .malloc_usable_size = (size_t (*)(const void*))malloc_usable_size,
    .memalign = memalign,
    .posix_memalign = posix_memalign,
    .realloc = realloc,
    .reallocarray = reallocarray,
    .malloc_iterate = no_iterate,
    .malloc_disable = no_op,
    .malloc_enable = no_op,
    .mallopt = mallopt,
    .aligned_alloc = aligned_alloc,
    .malloc_info = malloc_info,
};

// The table init() passes: Android 17's when MALLOC_DEBUG_TEST_LAYOUT=17, else the classic one.
static const MallocDispatch* native_table(void) {
  const char* layout = getenv("MALLOC_DEBUG_TEST_LAYOUT");
  if (layout != NULL && strcmp(layout, "17") == 0) return (const MallocDispatch*)&native17;
  return &native;
}

#define DEBUG_FUNCTIONS(X)                                                          \
  X(initialize) X(finalize) X(get_malloc_leak_info) X(free_malloc_leak_info)        \
  X(malloc_backtrace) X(write_malloc_leak_info) X(free) X(calloc) X(mallinfo)       \
  X(mallopt) X(malloc) X(malloc_info) X(malloc_usable_size) X(memalign)             \
  X(posix_memalign) X(aligned_alloc) X(realloc) X(malloc_iterate) X(malloc_disable) \
  X(malloc_enable) X(dump_heap) X(iterate) X(reallocarray)

#define DECLARE(name) static __typeof__(debug_##name)* d_##name;
DEBUG_FUNCTIONS(DECLARE)

static void load(const char* lib) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("dlopen failed: %s\n", dlerror());
    exit(2);
  }
#define RESOLVE(name)                                        \
  d_##name = (__typeof__(d_##name))dlsym(h, "debug_" #name); \
  if (d_##name == NULL) {                                    \
    printf("missing debug_%s\n", #name);                     \
    exit(2);                                                 \
  }
  DEBUG_FUNCTIONS(RESOLVE)
}

static bool zygote_child;

static int init(const char* options) {
  bool ok = d_initialize(native_table(), &zygote_child, options);
  printf("initialize=%d\n", ok);
  return ok;
}

#define CHECK(cond)                                             \
  do {                                                          \
    if (!(cond)) {                                              \
      printf("FAILED line %d: %s\n", __LINE__, #cond);          \
      exit(1);                                                  \
    }                                                           \
  } while (0)
