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
 * The front's parts are listed in front.h.
 *
 * Nothing here allocates on its own behalf: messages are formatted into stack buffers and written
 * with one write(2) per line.
 */

#include "front.h"

/* ------------------------------------------------------------------------------------------ */
/* The malloc family.                                                                         */
/* ------------------------------------------------------------------------------------------ */

EXPORT void* malloc(size_t size) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) return t->malloc(size);
  return early_malloc(size);
}

/* Inlined into every exported free, so that a backtrace taken in the library shows one frame of
 * the front: the entry point the program called. */
static inline __attribute__((always_inline)) void free_through_table(void* pointer) {
  if (UNLIKELY(in_arena(pointer))) return; /* arena blocks are never reused */
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) {
    t->free(pointer);
  } else if (pointer != NULL && __libc_free != NULL) {
    __libc_free(pointer); /* cannot happen: no non-arena pointer exists before the table */
  }
}

EXPORT void free(void* pointer) { free_through_table(pointer); }

/* The frees a program calls by names its own allocator may leave out. When the process's malloc
 * is not the front's, its blocks go back to its own free (g_process_free, set before the table
 * is published); the front's free itself stays glibc's, for an allocator that wraps "the next
 * malloc" and so calls it. */
static inline __attribute__((always_inline)) void free_for_program(void* pointer) {
  if (LIKELY(table() != NULL) && UNLIKELY(g_process_free != NULL)) {
    g_process_free(pointer);
    return;
  }
  free_through_table(pointer);
}

/* C23's sized frees, in glibc since 2.43 (GLib calls them when it was built against such a
 * glibc). glibc's own would take our blocks behind the library's back: a block with a header
 * does not start a glibc chunk (glibc aborts with "free(): invalid pointer"), and one without
 * stays in the live table while glibc reuses its memory. The size and alignment only promise
 * what the block is; free() is what they mean (docs/spec/abi.md#the-glibc-front). */
EXPORT void free_sized(void* pointer, size_t size) {
  (void)size;
  free_for_program(pointer);
}

EXPORT void free_aligned_sized(void* pointer, size_t alignment, size_t size) {
  (void)alignment;
  (void)size;
  free_for_program(pointer);
}

/* glibc's obsolete cfree: gone from its headers since 2.26, but binaries linked before still
 * call the compatibility symbol, which is glibc's free. */
EXPORT void cfree(void* pointer) { free_for_program(pointer); }

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

/* glibc's contract, not bionic's: C17 dropped the rule that the size be a multiple of the
 * alignment, glibc never enforced it, and glibc programs rely on that. The library's
 * aligned_alloc keeps the reference's EINVAL for such sizes (bionic's own aligned_alloc gives
 * it too), so they go to its memalign, which records and checks the block all the same. */
EXPORT void* aligned_alloc(size_t alignment, size_t size) {
  const MallocDispatch17* t = table();
  if (LIKELY(t != NULL)) {
    bool power_of_two = alignment != 0 && (alignment & (alignment - 1)) == 0;
    if (power_of_two && size % alignment != 0) return t->memalign(alignment, size);
    return t->aligned_alloc(alignment, size);
  }
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
