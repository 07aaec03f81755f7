/*
 * What the glibc front's files share (front.c's header comment explains the front as a whole).
 * Everything here is hidden (-fvisibility=hidden, ffi/build_front.rs); only EXPORT names leave
 * the shared object.
 *
 *   log.c        the log sink (logcat layout on stderr) and libc's error_log
 *   arena.c      the bootstrap arena and bootstrap-time allocation
 *   native.c     glibc's allocator as a MallocDispatch (g_native)
 *   bootstrap.c  deciding, loading the library, the one-time initialisation behind table()
 *   front.c      the exported malloc family and bionic's extra allocator API
 */
#pragma once
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <malloc.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "malloc_debug.h"

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)


/* glibc's allocator under its internal names (weak: a glibc without one of them falls back to
 * dlsym(RTLD_NEXT, public name) during bootstrap). */
extern void* __libc_malloc(size_t) __attribute__((weak));
extern void* __libc_calloc(size_t, size_t) __attribute__((weak));
extern void* __libc_realloc(void*, size_t) __attribute__((weak));
extern void __libc_free(void*) __attribute__((weak));
extern void* __libc_memalign(size_t, size_t) __attribute__((weak));
extern struct mallinfo __libc_mallinfo(void) __attribute__((weak));
extern int __libc_mallopt(int, int) __attribute__((weak));
#if !defined(__LP64__)
extern void* __libc_valloc(size_t) __attribute__((weak));
extern void* __libc_pvalloc(size_t) __attribute__((weak));
#endif

/* ---- log.c ---- */

void log_record(char prio, const char* tag, const char* msg);
const char* progname(void);
__attribute__((format(printf, 1, 2))) void libc_error_log(const char* fmt, ...);

/* ---- arena.c ---- */

#define ARENA_SIZE ((size_t)1 << 20)
extern unsigned char g_arena[ARENA_SIZE];

static inline bool in_arena(const void* p) {
  return (uintptr_t)p - (uintptr_t)g_arena < ARENA_SIZE;
}
size_t arena_size(const void* p);
void* early_memalign(size_t align, size_t size);
void* early_malloc(size_t size);
void* do_malloc(size_t size);
size_t page_size(void);

/* ---- native.c ---- */

extern size_t (*g_libc_malloc_usable_size)(void*);
void fill_native_dispatch(void);
int native_malloc_iterate(uintptr_t base, size_t size,
                          void (*callback)(uintptr_t, size_t, void*), void* arg);
struct mallinfo fallback_mallinfo(void);
int fallback_malloc_info(int options, FILE* fp);

/* ---- bootstrap.c ---- */

typedef bool (*init_func_t)(const MallocDispatch*, bool*, const char*);
typedef void (*finalize_func_t)(void);
typedef void (*get_malloc_leak_info_func_t)(uint8_t**, size_t*, size_t*, size_t*, size_t*);
typedef void (*free_malloc_leak_info_func_t)(uint8_t*);
typedef ssize_t (*malloc_backtrace_func_t)(void*, uintptr_t*, size_t);
typedef bool (*write_malloc_leak_info_func_t)(FILE*);

/* libc's gFunctions[] (same names, same order). */
enum {
  FUNC_INITIALIZE,
  FUNC_FINALIZE,
  FUNC_GET_MALLOC_LEAK_INFO,
  FUNC_FREE_MALLOC_LEAK_INFO,
  FUNC_MALLOC_BACKTRACE,
  FUNC_WRITE_LEAK_INFO,
  FUNC_LAST,
};
extern void* g_functions[FUNC_LAST];


/* glibc's allocator as handed to debug_initialize; never changed after bootstrap. */
extern MallocDispatch17 g_native;
/* The library's debug_* entries; published only after debug_initialize succeeded. */
extern MallocDispatch17 g_debug;
/* The table every exported call goes through: NULL until bootstrap ends, then &g_debug or
 * &g_native (atomic). */
extern const MallocDispatch17* g_table;
/* Non-zero once malloc debug is installed (atomic; guards g_functions). */
extern int g_debug_loaded;
/* libc's gZygoteChild: set by android_mallopt(M_SET_ZYGOTE_CHILD). */
extern bool g_zygote_child;

enum { STATE_UNINIT, STATE_INITIALIZING, STATE_READY };
extern int g_state;        /* atomic */
extern long g_init_tid;    /* the bootstrapping thread, valid while STATE_INITIALIZING */

/* The process's own free when its executable (or an earlier preload) defines malloc; NULL when
 * the front's malloc is the process's. */
extern MallocFree g_process_free;

const MallocDispatch17* table_slow(void);
const MallocDispatch17* wait_for_table(void);
bool debug_loaded(void);

/* The table every call goes through, or NULL while the caller must use the arena. */
static inline const MallocDispatch17* table(void) {
  const MallocDispatch17* t = __atomic_load_n(&g_table, __ATOMIC_ACQUIRE);
  if (LIKELY(t != NULL)) return t;
  return table_slow();
}
