// The spec's floor: a preloaded shim that does only the memory work the spec requires of an
// option (fills, guards, the free queue and its checks), inline and with nothing else: no
// pointer table, no backtraces, no verification of foreign pointers, no locks beyond the free
// queue's. Its overhead is a lower bound for any implementation of the option, so a target
// below it cannot be met without changing what the option does. scripts/bench runs it as the
// "floor:" rows. Not a malloc debugger: it cannot report anything.
//
// FLOOR=fill        malloc fills the usable size with 0xeb, free with 0xef; realloc fills the
//                   grown tail (docs/spec/allocation.md#fill)
// FLOOR=guard       32-byte header-and-alignment, 32-byte front guard of 0xaa, 32-byte rear
//                   guard of 0xbb; free compares both guards and marks the header freed
//                   (docs/spec/allocation.md#header-mode, #free)
// FLOOR=guard_fill  both of the above (the fill covers the requested size: a rear guard makes
//                   that the usable size)
// FLOOR=free_track  fill on free, a FIFO of 100 freed blocks, each compared with 0xef when it
//                   leaves the queue (docs/spec/allocation.md#free_track); no free-time backtrace
// FLOOR=record_allocs  a 56-byte entry per call in a mapped array of 8,000,000 (reused from the
//                   start when full), CLOCK_MONOTONIC around each native call, and the present
//                   bytes of every freed or reallocated block from /proc/self/pagemap
//                   (docs/spec/abi.md#present-bytes)
//
// Only malloc, calloc, realloc, free and malloc_usable_size are wrapped: enough for
// benches/alloc_mix.c, not for programs that use the aligned allocations.
//
// Built with -DFLOOR_FOR_BIONIC (scripts/bench-android, host gcc and glibc headers linked against
// an Android root's libc.so), the native functions are found with dlsym(RTLD_NEXT) instead of
// glibc's __libc_ names, and errno is bionic's.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef FLOOR_FOR_BIONIC
#undef errno
extern int* __errno(void);
#define errno (*__errno())
static void* (*next_malloc)(size_t);
static void* (*next_calloc)(size_t, size_t);
static void* (*next_realloc)(void*, size_t);
static void* (*next_memalign)(size_t, size_t);
static void (*next_free)(void*);
// bionic's dlsym does not allocate, so the first call can resolve them all.
static void resolve_next(void) {
  next_calloc = (void* (*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  next_realloc = (void* (*)(void*, size_t))dlsym(RTLD_NEXT, "realloc");
  next_memalign = (void* (*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
  next_free = (void (*)(void*))dlsym(RTLD_NEXT, "free");
  next_malloc = (void* (*)(size_t))dlsym(RTLD_NEXT, "malloc");
}
// Before main, when this runs, the process has one thread; a call before it resolves lazily.
__attribute__((constructor)) static void floor_resolve(void) {
  if (!next_malloc) resolve_next();
}
#define NEXT(f) (next_malloc ? 0 : (resolve_next(), 0), next_##f)
static void* __libc_malloc(size_t n) { return NEXT(malloc)(n); }
static void* __libc_calloc(size_t k, size_t n) { return NEXT(calloc)(k, n); }
static void* __libc_realloc(void* p, size_t n) { return NEXT(realloc)(p, n); }
static void* __libc_memalign(size_t a, size_t n) { return NEXT(memalign)(a, n); }
static void __libc_free(void* p) { NEXT(free)(p); }
#else
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);
#endif

// glibc has no __libc_ name for it, and this file defines the public one.
static size_t native_usable_size(void* p) {
  static size_t (*next)(void*);
  if (!next) next = (size_t(*)(void*))dlsym(RTLD_NEXT, "malloc_usable_size");
  return next(p);
}

enum { FILL = 1, GUARD = 2, TRACK = 4, RECORD = 8 };

#define HEADER 32
#define FRONT 32
#define REAR 32
#define OFFSET (HEADER + FRONT)
#define LIVE_TAG 0x1ee7d00du
#define FREE_TAG 0x1cc7dccdu
#define QUEUE 100

struct header {
  uint32_t tag;
  uint32_t pad;
  void* orig;
  size_t size;
  size_t usable;
};

static int mode = -1;

static int floor_mode(void) {
  if (mode < 0) {
    const char* m = getenv("FLOOR");
    int v = 0;
    if (m && strcmp(m, "fill") == 0) v = FILL;
    if (m && strcmp(m, "guard") == 0) v = GUARD;
    if (m && strcmp(m, "guard_fill") == 0) v = GUARD | FILL;
    if (m && strcmp(m, "free_track") == 0) v = FILL | TRACK;
    if (m && strcmp(m, "record_allocs") == 0) v = RECORD;
    mode = v;
  }
  return mode;
}

static struct header* header_of(void* p) { return (struct header*)((char*)p - OFFSET); }

// Eight bytes at a time, OR-ed together (the vectoriser widens it at -O3).
static int all_equal(const unsigned char* p, size_t n, unsigned char v) {
  uint64_t pattern = 0x0101010101010101ull * v, acc = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    acc |= w ^ pattern;
  }
  for (; i < n; i++) acc |= p[i] ^ v;
  return acc == 0;
}

// Counted, so that the compares cannot be optimised away; nothing reads it.
static atomic_ulong damaged;

// Guard mode: the block, its header and guards in one native allocation
// (docs/spec/allocation.md#malloc; the reference: memalign with the minimum alignment, 16).
static void* guarded(size_t n, int zero) {
  char* o = __libc_memalign(16, n + OFFSET + REAR);
  if (!o) return NULL;
  if (zero) memset(o, 0, n + OFFSET + REAR);
  char* p = o + OFFSET;
  struct header* h = header_of(p);
  h->tag = LIVE_TAG;
  h->orig = o;
  h->size = n;
  h->usable = n;
  memset(p - FRONT, 0xaa, FRONT);
  memset(p + n, 0xbb, REAR);
  return p;
}

static void* fifo[QUEUE];
static size_t fifo_len, fifo_head;
static pthread_mutex_t fifo_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t usable(void* p) {
  return (floor_mode() & GUARD) ? header_of(p)->usable : native_usable_size(p);
}

static void release(void* p) {
  __libc_free((floor_mode() & GUARD) ? header_of(p)->orig : p);
}

static void fill_fresh(void* p, size_t from) {
  size_t n = usable(p);
  if (n > from) memset((char*)p + from, 0xeb, n - from);
}

#define RECORDS 8000000
struct record {
  int32_t tid;
  uint8_t type;
  uint64_t ptr, size, u;
  int64_t present;
  uint64_t start_ns, end_ns;
};
static struct record* records;
static atomic_size_t record_next;
static int pagemap = -1;
static __thread int32_t my_tid;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static struct record* reserve(uint8_t type) {
  if (!records) {
    void* mem = mmap(NULL, RECORDS * sizeof(struct record), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) abort();
    records = mem;
    pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  }
  if (!my_tid) my_tid = (int32_t)syscall(SYS_gettid);
  struct record* r = &records[atomic_fetch_add(&record_next, 1) % RECORDS];
  r->tid = my_tid;
  r->type = type;
  r->present = -1;
  r->start_ns = now_ns();
  return r;
}

// Bytes of [p, p + n) in present pages, in reads of up to 64 entries.
static int64_t present_bytes(void* p, size_t n) {
  uint64_t entries[64];
  uintptr_t first = (uintptr_t)p / 4096, last = ((uintptr_t)p + n - 1) / 4096;
  int64_t present = 0;
  for (uintptr_t page = first; page <= last;) {
    size_t count = last - page + 1 > 64 ? 64 : last - page + 1;
    if (pread(pagemap, entries, count * 8, (off_t)(page * 8)) != (ssize_t)(count * 8)) return -1;
    for (size_t i = 0; i < count; i++, page++) {
      if (!(entries[i] >> 63)) continue;
      uintptr_t lo = page * 4096 > (uintptr_t)p ? page * 4096 : (uintptr_t)p;
      uintptr_t hi = (page + 1) * 4096 < (uintptr_t)p + n ? (page + 1) * 4096 : (uintptr_t)p + n;
      present += (int64_t)(hi - lo);
    }
  }
  return present;
}

static void* recorded(uint8_t type, void* old, size_t k, size_t n) {
  struct record* r = reserve(type);
  void* q;
  if (type == 3) {
    size_t len = native_usable_size(old);
    r->present = len ? present_bytes(old, len) : -1;
    q = __libc_realloc(old, n);
  } else if (type == 1) {
    q = __libc_calloc(k, n);
  } else {
    q = __libc_malloc(n);
  }
  r->end_ns = now_ns();
  r->ptr = (uintptr_t)q;
  r->size = n;
  r->u = type == 3 ? (uintptr_t)old : k;
  return q;
}

void* malloc(size_t n) {
  int m = floor_mode();
  if (m & RECORD) return recorded(0, NULL, 0, n);
  void* p = (m & GUARD) ? guarded(n ? n : 1, 0) : __libc_malloc(n);
  if (p && (m & FILL) && !(m & TRACK)) fill_fresh(p, 0);
  return p;
}

void* calloc(size_t k, size_t n) {
  size_t total;
  if (__builtin_mul_overflow(k, n, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  if (floor_mode() & RECORD) return recorded(1, NULL, k, n);
  return (floor_mode() & GUARD) ? guarded(total ? total : 1, 1) : __libc_calloc(k, n);
}

void free(void* p) {
  int m = floor_mode();
  if (!p) return;
  if (m & RECORD) {
    size_t len = native_usable_size(p);
    int64_t present = len ? present_bytes(p, len) : -1;
    struct record* r = reserve(4);
    r->present = present;
    r->ptr = (uintptr_t)p;
    __libc_free(p);
    r->end_ns = now_ns();
    return;
  }
  if (m & GUARD) {
    struct header* h = header_of(p);
    if (!all_equal((unsigned char*)p - FRONT, FRONT, 0xaa)) damaged++;
    if (!all_equal((unsigned char*)p + h->size, REAR, 0xbb)) damaged++;
    h->tag = FREE_TAG;
  }
  if (m & FILL) memset(p, 0xef, usable(p));
  if (!(m & TRACK)) {
    release(p);
    return;
  }
  void* evicted = NULL;
  pthread_mutex_lock(&fifo_lock);
  if (fifo_len == QUEUE) {
    evicted = fifo[fifo_head];
    fifo_head = (fifo_head + 1) % QUEUE;
    fifo_len--;
  }
  fifo[(fifo_head + fifo_len) % QUEUE] = p;
  fifo_len++;
  pthread_mutex_unlock(&fifo_lock);
  if (evicted) {
    if (!all_equal(evicted, usable(evicted), 0xef)) damaged++;
    release(evicted);
  }
}

void* realloc(void* p, size_t n) {
  int m = floor_mode();
  if (!p) return malloc(n);
  if (m & RECORD) return recorded(3, p, 0, n);
  if (n == 0) {
    free(p);
    return NULL;
  }
  if (!(m & GUARD)) {
    // No header: the native realloc, and only malloc's fill for the grown tail
    // (docs/spec/allocation.md#realloc; free_track alone fills nothing on allocation).
    size_t prev = native_usable_size(p);
    void* q = __libc_realloc(p, n);
    if (q && (m & FILL) && !(m & TRACK)) fill_fresh(q, prev);
    return q;
  }
  size_t prev = usable(p);
  if (n <= prev) {
    struct header* h = header_of(p);
    h->size = h->usable = n;
    memset((char*)p + n, 0xbb, REAR);
    return p;
  }
  void* q = malloc(n);
  if (!q) return NULL;
  memcpy(q, p, prev < n ? prev : n);
  free(p);
  return q;
}

size_t malloc_usable_size(void* p) { return p ? usable(p) : 0; }
