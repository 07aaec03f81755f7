/* glibc's allocator as the MallocDispatch handed to debug_initialize (g_native). */
#include "front.h"

/* ---- glibc entries without a usable internal name, and the bionic-only ones ---- */

size_t (*g_libc_malloc_usable_size)(void*);
static int (*g_libc_posix_memalign)(void**, size_t, size_t);
static void* (*g_libc_aligned_alloc)(size_t, size_t);
static int (*g_libc_malloc_info)(int, FILE*);

int native_malloc_iterate(uintptr_t base, size_t size,
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

int fallback_malloc_info(int options, FILE* fp) {
  (void)options;
  (void)fp;
  errno = ENOTSUP;
  return -1;
}

struct mallinfo fallback_mallinfo(void) {
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
void fill_native_dispatch(void) {
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
