/* Deciding whether malloc debug is wanted, loading the library in bionic's order with
 * bionic's messages, and the one-time initialisation every exported call waits for. */
#include "front.h"

extern int __cxa_atexit(void (*func)(void*), void* arg, void* dso_handle);
extern void* __dso_handle;
extern char** environ;

static const char kDebugSharedLib[] = "libc_malloc_debug.so";
static const char kDebugPrefix[] = "debug";

/* ------------------------------------------------------------------------------------------ */
/* Tables and one-time initialisation.                                                        */
/* ------------------------------------------------------------------------------------------ */

void* g_functions[FUNC_LAST];


/* glibc's allocator as handed to debug_initialize; never changed after bootstrap. */
MallocDispatch17 g_native;
/* The library's debug_* entries; published only after debug_initialize succeeded. */
MallocDispatch17 g_debug;
/* The table every exported call goes through: NULL until bootstrap ends, then &g_debug or
 * &g_native (atomic). */
const MallocDispatch17* g_table;
/* Non-zero once malloc debug is installed (atomic; guards g_functions). */
int g_debug_loaded;
/* libc's gZygoteChild: set by android_mallopt(M_SET_ZYGOTE_CHILD). */
bool g_zygote_child;

int g_state;        /* atomic */
long g_init_tid;    /* the bootstrapping thread, valid while STATE_INITIALIZING */


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
 * already closed (coreutils close their standard streams in their own exit handlers).
 * Each stream is closed through a duplicate of its descriptor: closing the descriptor itself
 * and putting it back with dup2 left it free for a moment, and another thread opening a file
 * then was given it, only to lose it to the dup2 (docs/design.md, "The front at exit"). When no
 * duplicate can be made the stream stays open: its buffer is reported rather than a descriptor
 * number freed. */
static void malloc_fini(void* arg) {
  (void)arg;
  fflush(NULL);
  FILE* streams[3] = {stdin, stdout, stderr};
  for (int i = 0; i < 3; i++) {
    int fd = fileno(streams[i]);
    if (fd < 0) continue;
    int spare = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (spare < 0) continue;
    streams[i]->_fileno = spare; /* glibc's FILE: fclose closes the spare, fd stays */
    fclose(streams[i]);
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

/* The file of the object whose malloc the process binds to, when that is not this front: an
 * executable with an allocator of its own (a statically linked jemalloc, mimalloc or
 * PartitionAlloc), or one preloaded before the front, comes first in symbol lookup. NULL when
 * the front's malloc is the process's.
 *
 * The symbol found must be a definition. A non-PIE executable that takes malloc's address has
 * an undefined malloc whose value is its PLT entry (the address the whole process uses for
 * malloc), and dlsym returns that entry, which leads to the front's malloc all the same. */
static const char* foreign_allocator(void) {
  void* bound = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info bound_info, own_info;
  const ElfW(Sym)* symbol = NULL;
  if (bound == NULL || dladdr1(bound, &bound_info, (void**)&symbol, RTLD_DL_SYMENT) == 0 ||
      symbol == NULL || symbol->st_shndx == SHN_UNDEF ||
      dladdr((void*)&foreign_allocator, &own_info) == 0 ||
      bound_info.dli_fbase == own_info.dli_fbase) {
    return NULL;
  }
  return bound_info.dli_fname != NULL && bound_info.dli_fname[0] != '\0' ? bound_info.dli_fname
                                                                          : progname();
}

/* The process's realloc and free, when its allocator is not the front's (NULL otherwise). */
static MallocRealloc g_process_realloc;
MallocFree g_process_free;

static void* process_reallocarray(void* pointer, size_t nmemb, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return g_process_realloc(pointer, total);
}

/* A process with its own allocator calls the front only for the names that allocator leaves
 * out (reallocarray, the sized frees, cfree, ...), and those must act on its blocks: they go to
 * the process's realloc and free. The front's own malloc, free, calloc and realloc stay glibc's,
 * as without the front, since only an allocator that wraps "the next malloc" (dlsym RTLD_NEXT)
 * calls them. Malloc debug, which would see none of the process's allocations, is not loaded
 * (docs/spec/abi.md#the-glibc-front). */
static void use_foreign_allocator(const char* object, const char* options) {
  g_process_realloc = (MallocRealloc)dlsym(RTLD_DEFAULT, "realloc");
  g_process_free = (MallocFree)dlsym(RTLD_DEFAULT, "free");
  if (g_process_realloc != NULL) g_native.reallocarray = process_reallocarray;
  if (options != NULL) {
    libc_error_log("%s: malloc debug not enabled: %s defines malloc, so the process's "
                   "allocations never reach malloc debug",
                   progname(), object);
  }
}

static void bootstrap(void) {
  int saved_errno = errno;
  fill_native_dispatch();
  const MallocDispatch17* table = &g_native;
  const char* options = debug_options();
  const char* foreign = foreign_allocator();
  if (foreign != NULL) {
    use_foreign_allocator(foreign, options);
  } else if (options != NULL) {
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
__attribute__((noinline)) const MallocDispatch17* table_slow(void) {
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

/* The arena is full. A thread other than the bootstrapping one waits for the table; the
 * bootstrapping thread itself (or a call before libc's initialisation) gets NULL. */
const MallocDispatch17* wait_for_table(void) {
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

bool debug_loaded(void) {
  (void)table();
  return __atomic_load_n(&g_debug_loaded, __ATOMIC_ACQUIRE) != 0;
}

__attribute__((constructor)) static void front_constructor(void) { (void)table(); }

