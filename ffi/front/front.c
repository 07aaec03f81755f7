/*
 * libmalloc_debug_front.so — the glibc front of libc_malloc_debug.so
 * (docs/spec/abi.md#the-glibc-front).
 *
 * Preloaded with LD_PRELOAD, it plays the part bionic's malloc_common_dynamic plays on Android:
 * it owns the process's malloc family, decides once whether malloc debug is wanted, loads the
 * library, resolves its debug_* names in bionic's order with bionic's messages, hands it a
 * MallocDispatch made of glibc's allocator (Android 17's layout, with reallocarray: the front
 * plays today's bionic), and from then on routes every call through the
 * library's table (or straight to glibc when malloc debug is off or failed to start).
 *
 * Bootstrap. Everything happens on the first call of any exported function (or in the
 * constructor, whichever comes first). dlopen and dlsym allocate, so while the process's one
 * initialising thread is busy, every allocation (its own recursive ones and any other thread's)
 * is served from a static bump arena. Arena blocks are never reused: free() ignores them forever
 * after, realloc() copies them out, malloc_usable_size() reads their recorded size.
 *
 * Nothing here allocates on its own behalf: messages are formatted into stack buffers and written
 * with one write(2) per line.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

extern int __cxa_atexit(void (*func)(void*), void* arg, void* dso_handle);
extern void* __dso_handle;
extern char** environ;

static const char kDebugSharedLib[] = "libc_malloc_debug.so";
static const char kDebugPrefix[] = "debug";

/* ------------------------------------------------------------------------------------------ */
/* Log sink: logcat "threadtime" layout on stderr, UTC, no allocation.                        */
/* ------------------------------------------------------------------------------------------ */

struct out_buf {
  char data[1536];
  size_t len;
};

static void out_bytes(struct out_buf* b, const char* s, size_t n) {
  size_t room = sizeof(b->data) - b->len;
  if (n > room) n = room;
  memcpy(b->data + b->len, s, n);
  b->len += n;
}

static void out_str(struct out_buf* b, const char* s) { out_bytes(b, s, strlen(s)); }

/* Decimal, right-aligned in `width` columns, padded with `pad`. */
static void out_num(struct out_buf* b, long long v, int width, char pad) {
  char tmp[24];
  int n = 0;
  bool neg = v < 0;
  unsigned long long u = neg ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (neg) tmp[n++] = '-';
  for (int i = n; i < width; i++) out_bytes(b, &pad, 1);
  while (n > 0) out_bytes(b, &tmp[--n], 1);
}

/* Days since 1970-01-01 to month/day (proleptic Gregorian, Hinnant's civil_from_days). */
static void civil_from_days(long long days, int* month, int* day) {
  long long z = days + 719468;
  long long era = (z >= 0 ? z : z - 146096) / 146097;
  long long doe = z - era * 146097;
  long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  long long mp = (5 * doy + 2) / 153;
  *day = (int)(doy - (153 * mp + 2) / 5 + 1);
  *month = (int)(mp < 10 ? mp + 3 : mp - 9);
}

static void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

/* One log record: every line of `msg` gets the prefix; one write(2) per line. */
static void log_record(char prio, const char* tag, const char* msg) {
  struct timespec ts = {0, 0};
  clock_gettime(CLOCK_REALTIME, &ts);
  long long secs = (long long)ts.tv_sec;
  long long days = (secs >= 0 ? secs : secs - 86399) / 86400;
  long long sod = secs - days * 86400;
  int month, day;
  civil_from_days(days, &month, &day);

  struct out_buf prefix = {.len = 0};
  out_num(&prefix, month, 2, '0');
  out_str(&prefix, "-");
  out_num(&prefix, day, 2, '0');
  out_str(&prefix, " ");
  out_num(&prefix, sod / 3600, 2, '0');
  out_str(&prefix, ":");
  out_num(&prefix, sod / 60 % 60, 2, '0');
  out_str(&prefix, ":");
  out_num(&prefix, sod % 60, 2, '0');
  out_str(&prefix, ".");
  out_num(&prefix, ts.tv_nsec / 1000000, 3, '0');
  out_str(&prefix, " ");
  out_num(&prefix, getpid(), 5, ' ');
  out_str(&prefix, " ");
  out_num(&prefix, syscall(SYS_gettid), 5, ' ');
  out_str(&prefix, " ");
  out_bytes(&prefix, &prio, 1);
  out_str(&prefix, " ");
  out_str(&prefix, tag);
  for (size_t i = strlen(tag); i < 8; i++) out_str(&prefix, " ");
  out_str(&prefix, ": ");

  size_t len = strlen(msg);
  /* A trailing newline ends the last line rather than starting an empty one. */
  if (len > 0 && msg[len - 1] == '\n') len--;
  const char* line = msg;
  const char* end = msg + len;
  for (;;) {
    const char* nl = memchr(line, '\n', (size_t)(end - line));
    const char* line_end = nl != NULL ? nl : end;
    struct out_buf out = prefix;
    out_bytes(&out, line, (size_t)(line_end - line));
    if (out.len == sizeof(out.data)) out.len--;
    out.data[out.len++] = '\n';
    write_all(STDERR_FILENO, out.data, out.len);
    if (nl == NULL) break;
    line = nl + 1;
  }
}

static const char* progname(void) {
  const char* p = program_invocation_short_name;
  return p != NULL ? p : "";
}

/* libc's error_log (tag "libc", priority ERROR). Simple %s/%d formats only: glibc's snprintf
 * does not allocate for them. */
__attribute__((format(printf, 1, 2))) static void libc_error_log(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  log_record('E', "libc", msg);
}

/* ------------------------------------------------------------------------------------------ */
/* Bootstrap arena.                                                                           */
/* ------------------------------------------------------------------------------------------ */

#define ARENA_SIZE ((size_t)1 << 20)
#define ARENA_HEADER 16
#define ARENA_MAGIC ((size_t)0x6d64626f6f747374ULL) /* "mdbootst" */

static unsigned char g_arena[ARENA_SIZE] __attribute__((aligned(4096)));
static size_t g_arena_used; /* atomic; bump offset */

static inline bool in_arena(const void* p) {
  return (uintptr_t)p - (uintptr_t)g_arena < ARENA_SIZE;
}

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

static size_t arena_size(const void* p) {
  const size_t* header = (const size_t*)((const unsigned char*)p - ARENA_HEADER);
  if ((uintptr_t)p - (uintptr_t)g_arena < ARENA_HEADER || header[1] != ARENA_MAGIC) return 0;
  return header[0];
}

/* ------------------------------------------------------------------------------------------ */
/* Tables and one-time initialisation.                                                        */
/* ------------------------------------------------------------------------------------------ */

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
static void* g_functions[FUNC_LAST];

/* glibc's allocator as handed to debug_initialize; never changed after bootstrap. */
static MallocDispatch17 g_native;
/* The library's debug_* entries; published only after debug_initialize succeeded. */
static MallocDispatch17 g_debug;
/* The table every exported call goes through: NULL until bootstrap ends, then &g_debug or
 * &g_native (atomic). */
static const MallocDispatch17* g_table;
/* Non-zero once malloc debug is installed (atomic; guards g_functions). */
static int g_debug_loaded;
/* libc's gZygoteChild: set by android_mallopt(M_SET_ZYGOTE_CHILD). */
static bool g_zygote_child;

enum { STATE_UNINIT, STATE_INITIALIZING, STATE_READY };
static int g_state;        /* atomic */
static long g_init_tid;    /* the bootstrapping thread, valid while STATE_INITIALIZING */

/* ---- glibc entries without a usable internal name, and the bionic-only ones ---- */

static size_t (*g_libc_malloc_usable_size)(void*);
static int (*g_libc_posix_memalign)(void**, size_t, size_t);
static void* (*g_libc_aligned_alloc)(size_t, size_t);
static int (*g_libc_malloc_info)(int, FILE*);

static int native_malloc_iterate(uintptr_t base, size_t size,
                                 void (*callback)(uintptr_t, size_t, void*), void* arg) {
  (void)base;
  (void)size;
  (void)callback;
  (void)arg;
  errno = ENOTSUP;
  return -1;
}

static void native_malloc_disable(void) {}
static void native_malloc_enable(void) {}

/* Used only if glibc lacks a symbol (dlsym failed): keep the table complete. */
static size_t fallback_usable_size(const void* p) {
  (void)p;
  return 0;
}

static void* fallback_memalign(size_t align, size_t size);

static int fallback_posix_memalign(void** out, size_t align, size_t size) {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  int saved = errno;
  void* p = fallback_memalign(align, size);
  errno = saved;
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

static int fallback_malloc_info(int options, FILE* fp) {
  (void)options;
  (void)fp;
  errno = ENOTSUP;
  return -1;
}

static struct mallinfo fallback_mallinfo(void) {
  struct mallinfo mi;
  memset(&mi, 0, sizeof(mi));
  return mi;
}

static int fallback_mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 0;
}

static void* next_symbol(const char* name) { return dlsym(RTLD_NEXT, name); }

static void* fallback_memalign(size_t align, size_t size) {
  static void* (*next_memalign)(size_t, size_t);
  if (next_memalign == NULL) next_memalign = (void* (*)(size_t, size_t))next_symbol("memalign");
  return next_memalign != NULL ? next_memalign(align, size) : NULL;
}

#define PICK(internal, public_name) \
  ((internal) != NULL ? (internal) : (__typeof__(&(internal)))next_symbol(public_name))

/* The native reallocarray: glibc's contract on glibc's realloc. (glibc's own reallocarray would
 * do, but whether its inner realloc call can be interposed is glibc's business; this cannot.) */
static void* native_reallocarray(void* pointer, size_t nmemb, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return g_native.realloc(pointer, total);
}

/* Fills g_native with glibc's allocator. Runs on the bootstrapping thread. */
static void fill_native_dispatch(void) {
  g_libc_malloc_usable_size = (size_t (*)(void*))next_symbol("malloc_usable_size");
  g_libc_posix_memalign = (int (*)(void**, size_t, size_t))next_symbol("posix_memalign");
  g_libc_aligned_alloc = (void* (*)(size_t, size_t))next_symbol("aligned_alloc");
  g_libc_malloc_info = (int (*)(int, FILE*))next_symbol("malloc_info");

  g_native.calloc = PICK(__libc_calloc, "calloc");
  g_native.free = PICK(__libc_free, "free");
  g_native.mallinfo = PICK(__libc_mallinfo, "mallinfo");
  g_native.malloc = PICK(__libc_malloc, "malloc");
  g_native.malloc_usable_size = g_libc_malloc_usable_size != NULL
                                    ? (MallocMallocUsableSize)g_libc_malloc_usable_size
                                    : fallback_usable_size;
  g_native.memalign = PICK(__libc_memalign, "memalign");
  if (g_native.memalign == NULL) g_native.memalign = fallback_memalign;
  g_native.posix_memalign =
      g_libc_posix_memalign != NULL ? g_libc_posix_memalign : fallback_posix_memalign;
#if !defined(__LP64__)
  g_native.pvalloc = PICK(__libc_pvalloc, "pvalloc");
  g_native.valloc = PICK(__libc_valloc, "valloc");
#endif
  g_native.realloc = PICK(__libc_realloc, "realloc");
  g_native.reallocarray = native_reallocarray;
  g_native.malloc_iterate = native_malloc_iterate;
  g_native.malloc_disable = native_malloc_disable;
  g_native.malloc_enable = native_malloc_enable;
  g_native.mallopt = PICK(__libc_mallopt, "mallopt");
  if (g_native.mallopt == NULL) g_native.mallopt = fallback_mallopt;
  if (g_native.mallinfo == NULL) g_native.mallinfo = fallback_mallinfo;
  g_native.aligned_alloc = g_libc_aligned_alloc != NULL ? g_libc_aligned_alloc : g_native.memalign;
  g_native.malloc_info = g_libc_malloc_info != NULL ? g_libc_malloc_info : fallback_malloc_info;
}

/* Would bionic load malloc debug? Env only (there are no properties on a host), plus the
 * host-only program filter that plays libc.debug.malloc.program. secure_getenv: like bionic,
 * AT_SECURE processes ignore these variables. */
static const char* debug_options(void) {
  const char* options = secure_getenv("LIBC_DEBUG_MALLOC_OPTIONS");
  if (options == NULL || options[0] == '\0') return NULL;
  const char* program = secure_getenv("LIBC_DEBUG_MALLOC_PROGRAM");
  if (program != NULL && program[0] != '\0' && strstr(progname(), program) == NULL) return NULL;
  return options;
}

/* Where the library is: LIBC_DEBUG_MALLOC_LIB, else libc_malloc_debug.so next to this front. */
static const char* library_path(char* buf, size_t size) {
  const char* env = secure_getenv("LIBC_DEBUG_MALLOC_LIB");
  if (env != NULL && env[0] != '\0') return env;
  Dl_info info;
  if (dladdr((void*)&library_path, &info) != 0 && info.dli_fname != NULL) {
    const char* slash = strrchr(info.dli_fname, '/');
    if (slash != NULL) {
      size_t dir_len = (size_t)(slash - info.dli_fname) + 1;
      if (dir_len + sizeof(kDebugSharedLib) <= size) {
        memcpy(buf, info.dli_fname, dir_len);
        memcpy(buf + dir_len, kDebugSharedLib, sizeof(kDebugSharedLib));
        return buf;
      }
    }
  }
  return kDebugSharedLib;
}

static bool init_malloc_function(void* handle, void** slot, const char* suffix) {
  char symbol[128];
  snprintf(symbol, sizeof(symbol), "%s_%s", kDebugPrefix, suffix);
  *slot = dlsym(handle, symbol);
  if (*slot == NULL) {
    libc_error_log("%s: dlsym(\"%s\") failed", progname(), symbol);
    return false;
  }
  return true;
}

#define INIT_FN(field, name) init_malloc_function(handle, (void**)&table->field, name)

/* bionic's InitMallocFunctions: dispatch entries, in libc's lookup order. */
static bool init_malloc_functions(void* handle, MallocDispatch17* table) {
  return INIT_FN(free, "free") && INIT_FN(calloc, "calloc") && INIT_FN(mallinfo, "mallinfo") &&
         INIT_FN(mallopt, "mallopt") && INIT_FN(malloc, "malloc") &&
         INIT_FN(malloc_info, "malloc_info") &&
         INIT_FN(malloc_usable_size, "malloc_usable_size") && INIT_FN(memalign, "memalign") &&
         INIT_FN(posix_memalign, "posix_memalign") && INIT_FN(aligned_alloc, "aligned_alloc") &&
         INIT_FN(realloc, "realloc") && INIT_FN(reallocarray, "reallocarray") &&
         INIT_FN(malloc_iterate, "malloc_iterate") &&
         INIT_FN(malloc_disable, "malloc_disable") && INIT_FN(malloc_enable, "malloc_enable")
#if !defined(__LP64__)
         && INIT_FN(pvalloc, "pvalloc") && INIT_FN(valloc, "valloc")
#endif
      ;
}

/* bionic's InitSharedLibrary: control functions first, then the dispatch entries. */
static bool init_shared_library(void* handle, const char* shared_lib, MallocDispatch17* table) {
  static const char* const names[FUNC_LAST] = {
      "initialize",       "finalize",         "get_malloc_leak_info",
      "free_malloc_leak_info", "malloc_backtrace", "write_malloc_leak_info",
  };
  for (size_t i = 0; i < FUNC_LAST; i++) {
    char symbol[128];
    snprintf(symbol, sizeof(symbol), "%s_%s", kDebugPrefix, names[i]);
    g_functions[i] = dlsym(handle, symbol);
    if (g_functions[i] == NULL) {
      libc_error_log("%s: %s routine not found in %s", progname(), symbol, shared_lib);
      memset(g_functions, 0, sizeof(g_functions));
      return false;
    }
  }
  if (!init_malloc_functions(handle, table)) {
    memset(g_functions, 0, sizeof(g_functions));
    return false;
  }
  return true;
}

/* The exit handler. Like bionic's MallocFiniImpl it closes the standard streams first so that
 * their buffers are not reported as leaks, but it keeps file descriptors 0-2 open (the host log
 * sink is fd 2, and later exit work may still write to them) and skips streams the program has
 * already closed (coreutils close their standard streams in their own exit handlers). */
static void malloc_fini(void* arg) {
  (void)arg;
  fflush(NULL);
  FILE* streams[3] = {stdin, stdout, stderr};
  for (int i = 0; i < 3; i++) {
    int fd = fileno(streams[i]);
    if (fd < 0) continue;
    int saved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    fclose(streams[i]);
    if (saved >= 0) {
      dup2(saved, fd);
      close(saved);
    }
  }
  finalize_func_t fn = (finalize_func_t)g_functions[FUNC_FINALIZE];
  if (fn != NULL) fn();
}

/* bionic's InstallHooks for the debug prefix, with the host's library path. */
static const MallocDispatch17* install_debug(const char* options) {
  char path_buf[PATH_MAX];
  const char* shared_lib = library_path(path_buf, sizeof(path_buf));
  void* handle = dlopen(shared_lib, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char* err = dlerror();
    libc_error_log("%s: Unable to open shared library %s: %s", progname(), shared_lib,
                   err != NULL ? err : "(null)");
    return NULL;
  }
  if (!init_shared_library(handle, shared_lib, &g_debug)) {
    dlclose(handle);
    return NULL;
  }
  init_func_t init = (init_func_t)g_functions[FUNC_INITIALIZE];
  if (!init((const MallocDispatch*)&g_native, &g_zygote_child, options)) {
    libc_error_log("%s: failed to enable malloc %s", progname(), kDebugPrefix);
    memset(g_functions, 0, sizeof(g_functions));
    dlclose(handle);
    return NULL;
  }
  __atomic_store_n(&g_debug_loaded, 1, __ATOMIC_RELEASE);
  /* The front's own handle: a NULL handle registered this early would run after _dl_fini. */
  int rc = __cxa_atexit(malloc_fini, NULL, &__dso_handle);
  if (rc != 0) {
    char msg[64];
    snprintf(msg, sizeof(msg), "failed to set atexit cleanup function: %d", rc);
    log_record('W', "libc", msg);
  }
  return &g_debug;
}

static void bootstrap(void) {
  int saved_errno = errno;
  fill_native_dispatch();
  const MallocDispatch17* table = &g_native;
  const char* options = debug_options();
  if (options != NULL) {
    const MallocDispatch17* debug = install_debug(options);
    if (debug != NULL) table = debug;
  }
  __atomic_store_n(&g_table, table, __ATOMIC_RELEASE);
  __atomic_store_n(&g_state, STATE_READY, __ATOMIC_RELEASE);
  errno = saved_errno;
}

/* Before libc.so has run its own initialisation (environ unset), the options cannot be read:
 * serve such early calls from the arena and decide later. */
static bool libc_initialised(void) { return environ != NULL; }

/* The slow path of table(): returns the table, or NULL when the caller must use the arena. */
static __attribute__((noinline)) const MallocDispatch17* table_slow(void) {
  int state = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
  if (state == STATE_UNINIT) {
    if (!libc_initialised()) return NULL;
    int expected = STATE_UNINIT;
    if (__atomic_compare_exchange_n(&g_state, &expected, STATE_INITIALIZING, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      __atomic_store_n(&g_init_tid, syscall(SYS_gettid), __ATOMIC_RELAXED);
      bootstrap();
      return __atomic_load_n(&g_table, __ATOMIC_ACQUIRE);
    }
    state = expected;
  }
  if (state == STATE_READY) return __atomic_load_n(&g_table, __ATOMIC_ACQUIRE);
  return NULL; /* another thread, or this one recursively, is bootstrapping */
}

static inline const MallocDispatch17* table(void) {
  const MallocDispatch17* t = __atomic_load_n(&g_table, __ATOMIC_ACQUIRE);
  if (LIKELY(t != NULL)) return t;
  return table_slow();
}

/* The arena is full. A thread other than the bootstrapping one waits for the table; the
 * bootstrapping thread itself (or a call before libc's initialisation) gets NULL. */
static const MallocDispatch17* wait_for_table(void) {
  for (;;) {
    int state = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
    if (state == STATE_READY) return __atomic_load_n(&g_table, __ATOMIC_ACQUIRE);
    if (state != STATE_INITIALIZING ||
        __atomic_load_n(&g_init_tid, __ATOMIC_RELAXED) == syscall(SYS_gettid)) {
      return NULL;
    }
    sched_yield();
  }
}

static bool debug_loaded(void) {
  (void)table();
  return __atomic_load_n(&g_debug_loaded, __ATOMIC_ACQUIRE) != 0;
}

__attribute__((constructor)) static void front_constructor(void) { (void)table(); }

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

static void* early_memalign(size_t align, size_t size) {
  void* p = arena_alloc(round_up_pow2(align), size, arena_limit());
  if (p != NULL) return p;
  const MallocDispatch17* t = wait_for_table();
  if (t != NULL) return t->memalign(align, size);
  errno = ENOMEM;
  return NULL;
}

static void* early_malloc(size_t size) {
  void* p = arena_alloc(16, size, arena_limit());
  if (p != NULL) return p;
  const MallocDispatch17* t = wait_for_table();
  if (t != NULL) return t->malloc(size);
  errno = ENOMEM;
  return NULL;
}

static void* do_malloc(size_t size) {
  const MallocDispatch17* t = table();
  return t != NULL ? t->malloc(size) : early_malloc(size);
}

static size_t page_size(void) {
  static size_t cached;
  size_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v == 0) {
    long s = sysconf(_SC_PAGESIZE);
    v = s > 0 ? (size_t)s : 4096;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* ------------------------------------------------------------------------------------------ */
/* The malloc family.                                                                         */
/* ------------------------------------------------------------------------------------------ */

EXPORT void* malloc(size_t size) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->malloc(size);
  return early_malloc(size);
}

EXPORT void free(void* pointer) {
  if (UNLIKELY(in_arena(pointer))) return; /* arena blocks are never reused */
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) {
    t->free(pointer);
  } else if (pointer != NULL && __libc_free != NULL) {
    __libc_free(pointer); /* cannot happen: no non-arena pointer exists before the table */
  }
}

EXPORT void* calloc(size_t nmemb, size_t size) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->calloc(nmemb, size);
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return early_malloc(total); /* arena memory is zero and never reused */
}

EXPORT void* realloc(void* pointer, size_t size) {
  if (UNLIKELY(in_arena(pointer))) {
    size_t old = arena_size(pointer);
    if (size == 0) return NULL; /* glibc semantics: the block is "freed" */
    void* q = do_malloc(size);
    if (q != NULL) memcpy(q, pointer, old < size ? old : size);
    return q;
  }
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->realloc(pointer, size);
  if (pointer == NULL) return early_malloc(size);
  return __libc_realloc != NULL ? __libc_realloc(pointer, size) : NULL;
}

/* Android 17's libc: reallocarray is a dispatch entry of its own (debug_reallocarray checks the
 * product); arena blocks and calls before the table exists take realloc's path. */
EXPORT void* reallocarray(void* pointer, size_t nmemb, size_t size) {
  if (LIKELY(!in_arena(pointer))) {
    const MallocDispatch17* t = table();
    if (LIKELY(t != NULL)) return t->reallocarray(pointer, nmemb, size);
  }
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(pointer, total);
}

EXPORT void* memalign(size_t alignment, size_t size) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->memalign(alignment, size);
  return early_memalign(alignment, size);
}

EXPORT int posix_memalign(void** memptr, size_t alignment, size_t size) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->posix_memalign(memptr, alignment, size);
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  int saved = errno;
  void* p = early_memalign(alignment, size);
  errno = saved;
  if (p == NULL) return ENOMEM;
  *memptr = p;
  return 0;
}

EXPORT void* aligned_alloc(size_t alignment, size_t size) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->aligned_alloc(alignment, size);
  return early_memalign(alignment, size);
}

EXPORT void* valloc(size_t size) {
  const MallocDispatch17* t = table();
#if !defined(__LP64__)
  if (LIKELY(t != NULL)) return t->valloc(size);
#else
  /* LP64 bionic has no valloc: page-aligned memalign through the table. */
  if (LIKELY(t != NULL)) return t->memalign(page_size(), size);
#endif
  return early_memalign(page_size(), size);
}

EXPORT void* pvalloc(size_t size) {
  size_t page = page_size();
  size_t rounded = (size + page - 1) & ~(page - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return NULL;
  }
  const MallocDispatch17* t = table();
#if !defined(__LP64__)
  if (LIKELY(t != NULL)) return t->pvalloc(size);
#else
  if (LIKELY(t != NULL)) return t->memalign(page, rounded);
#endif
  return early_memalign(page, rounded);
}

EXPORT size_t malloc_usable_size(void* pointer) {
  if (UNLIKELY(in_arena(pointer))) return arena_size(pointer);
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->malloc_usable_size(pointer);
  return g_libc_malloc_usable_size != NULL ? g_libc_malloc_usable_size(pointer) : 0;
}

/* glibc's struct mallinfo (int fields): the dispatch's mallinfo is glibc's on this host. */
EXPORT struct mallinfo mallinfo(void) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->mallinfo();
  return __libc_mallinfo != NULL ? __libc_mallinfo() : fallback_mallinfo();
}

EXPORT int mallopt(int param, int value) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->mallopt(param, value);
  return __libc_mallopt != NULL ? __libc_mallopt(param, value) : 0;
}

EXPORT int malloc_info(int options, FILE* fp) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->malloc_info(options, fp);
  return fallback_malloc_info(options, fp);
}

/* ------------------------------------------------------------------------------------------ */
/* bionic's extra allocator API (LIBC_Q and the deprecated leak API).                         */
/* ------------------------------------------------------------------------------------------ */

EXPORT int malloc_iterate(uintptr_t base, size_t size,
                          void (*callback)(uintptr_t base, size_t size, void* arg), void* arg) {
  const MallocDispatch17* t = table();
  if (t == NULL) return native_malloc_iterate(base, size, callback, arg);
  return t->malloc_iterate(base, size, callback, arg);
}

EXPORT void malloc_disable(void) {
  const MallocDispatch17* t = table();
  if (t != NULL) t->malloc_disable();
}

EXPORT void malloc_enable(void) {
  const MallocDispatch17* t = table();
  if (t != NULL) t->malloc_enable();
}

static bool get_leak_info(android_mallopt_leak_info_t* leak_info) {
  if (!debug_loaded()) {
    errno = ENOTSUP;
    return false;
  }
  ((get_malloc_leak_info_func_t)g_functions[FUNC_GET_MALLOC_LEAK_INFO])(
      &leak_info->buffer, &leak_info->overall_size, &leak_info->info_size,
      &leak_info->total_memory, &leak_info->backtrace_size);
  return true;
}

static bool free_leak_info(android_mallopt_leak_info_t* leak_info) {
  if (!debug_loaded()) {
    errno = ENOTSUP;
    return false;
  }
  ((free_malloc_leak_info_func_t)g_functions[FUNC_FREE_MALLOC_LEAK_INFO])(leak_info->buffer);
  return true;
}

static bool write_leak_info(FILE* fp) {
  bool written = false;
  if (debug_loaded()) {
    written = ((write_malloc_leak_info_func_t)g_functions[FUNC_WRITE_LEAK_INFO])(fp);
  }
  if (!written) {
    fprintf(fp, "Native heap dump not available. To enable, run these commands (requires root):\n");
    fprintf(fp, "# adb shell stop\n");
    fprintf(fp, "# adb shell setprop libc.debug.malloc.options backtrace\n");
    fprintf(fp, "# adb shell start\n");
    errno = ENOTSUP;
  }
  return written;
}

EXPORT void get_malloc_leak_info(uint8_t** info, size_t* overall_size, size_t* info_size,
                                 size_t* total_memory, size_t* backtrace_size) {
  if (info == NULL || overall_size == NULL || info_size == NULL || total_memory == NULL ||
      backtrace_size == NULL) {
    return;
  }
  *info = NULL;
  *overall_size = 0;
  *info_size = 0;
  *total_memory = 0;
  *backtrace_size = 0;
  android_mallopt_leak_info_t leak_info;
  memset(&leak_info, 0, sizeof(leak_info));
  if (get_leak_info(&leak_info)) {
    *info = leak_info.buffer;
    *overall_size = leak_info.overall_size;
    *info_size = leak_info.info_size;
    *total_memory = leak_info.total_memory;
    *backtrace_size = leak_info.backtrace_size;
  }
}

EXPORT void free_malloc_leak_info(uint8_t* info) {
  android_mallopt_leak_info_t leak_info;
  memset(&leak_info, 0, sizeof(leak_info));
  leak_info.buffer = info;
  (void)free_leak_info(&leak_info);
}

EXPORT ssize_t malloc_backtrace(void* pointer, uintptr_t* frames, size_t frame_count) {
  if (!debug_loaded()) return 0;
  return ((malloc_backtrace_func_t)g_functions[FUNC_MALLOC_BACKTRACE])(pointer, frames,
                                                                        frame_count);
}

/* android_mallopt(M_WRITE_MALLOC_LEAK_INFO_TO_FILE) as a plain function. */
EXPORT bool write_malloc_leak_info(FILE* fp) { return write_leak_info(fp); }

/* The part of bionic's android_mallopt that concerns malloc debug. */
EXPORT bool android_mallopt(int opcode, void* arg, size_t arg_size) {
  switch (opcode) {
    case MALLOC_DEBUG_M_SET_ZYGOTE_CHILD:
      if (arg != NULL || arg_size != 0) {
        errno = EINVAL;
        return false;
      }
      __atomic_store_n(&g_zygote_child, true, __ATOMIC_RELAXED);
      return true;
    case MALLOC_DEBUG_M_WRITE_MALLOC_LEAK_INFO_TO_FILE:
      if (arg == NULL || arg_size != sizeof(FILE*)) {
        errno = EINVAL;
        return false;
      }
      return write_leak_info((FILE*)arg);
    case MALLOC_DEBUG_M_GET_MALLOC_LEAK_INFO:
      if (arg == NULL || arg_size != sizeof(android_mallopt_leak_info_t)) {
        errno = EINVAL;
        return false;
      }
      return get_leak_info((android_mallopt_leak_info_t*)arg);
    case MALLOC_DEBUG_M_FREE_MALLOC_LEAK_INFO:
      if (arg == NULL || arg_size != sizeof(android_mallopt_leak_info_t)) {
        errno = EINVAL;
        return false;
      }
      return free_leak_info((android_mallopt_leak_info_t*)arg);
    default:
      errno = ENOTSUP;
      return false;
  }
}
