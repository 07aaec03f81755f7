// errno through the C ABI: every exported call that succeeds leaves errno as it was (README
// "Differences from the reference"). errno is set to a sentinel before each call and checked
// after it, for the first calls after initialize and for later ones while the library's tables
// grow (tens of thousands of live blocks), with the signal-driven work (heap dump, record file,
// allocator stats, unreachable check) run inside an allocation call.
// Usage: errno LIB OPTIONS [DIR]   (DIR: where dumps go; the options name files there)
// Prints "clobbered line N: CALL errno=E" once per offending line, then "errno checks C".
#include "bionic.h"

#include <signal.h>

#define SENTINEL 12345
static int checks, clobbered;
static int reported[4096];

#define KEEP(call)                                                             \
  do {                                                                         \
    errno = SENTINEL;                                                          \
    call;                                                                      \
    int e_ = errno;                                                            \
    checks++;                                                                  \
    if (e_ != SENTINEL && !reported[__LINE__ % 4096]++) {                      \
      printf("clobbered line %d: %s errno=%d\n", __LINE__, #call, e_);         \
      clobbered++;                                                             \
    }                                                                          \
  } while (0)

// A call whose result says whether it succeeded: errno is checked only then.
#define KEEP_IF(ok, call)                                                      \
  do {                                                                         \
    errno = SENTINEL;                                                          \
    call;                                                                      \
    int e_ = errno;                                                            \
    if (ok) {                                                                  \
      checks++;                                                                \
      if (e_ != SENTINEL && !reported[__LINE__ % 4096]++) {                    \
        printf("clobbered line %d: %s errno=%d\n", __LINE__, #call, e_);       \
        clobbered++;                                                           \
      }                                                                        \
    }                                                                          \
  } while (0)

static void count(uintptr_t base, size_t size, void* arg) {
  (void)base;
  (void)size;
  ++*(size_t*)arg;
}

// One of each allocation call, and the queries on the results.
static void round_of_calls(unsigned i) {
  void *p, *q, *r, *a, *m, *c;
  size_t usable;
  int rc;
  KEEP(p = d_malloc(1 + i % 300));
  KEEP(usable = d_malloc_usable_size(p));
  CHECK(usable >= 1 + i % 300);
  KEEP(q = d_calloc(1 + i % 7, 8 + i % 50));
  KEEP(r = d_realloc(NULL, 16 + i % 100));
  KEEP(r = d_realloc(r, 4000 + i % 100));
  KEEP(r = d_realloc(r, 10));
  KEEP(r = d_realloc(r, 10));
  KEEP(m = d_memalign(64, 100 + i % 64));
  KEEP(a = d_aligned_alloc(32, 64));
  KEEP(rc = d_posix_memalign(&c, 128, 1 + i % 500));
  CHECK(p && q && r && m && a && rc == 0);
  KEEP(d_free(p));
  KEEP(d_free(q));
  KEEP(d_free(m));
  KEEP(d_free(a));
  KEEP(d_free(c));
  KEEP(d_free(NULL));
  KEEP(r = d_realloc(r, 0));
  KEEP(d_free(r));
  p = NULL;
  KEEP(p = d_malloc(0));
  KEEP(d_free(p));
}

static void queries(const char* dir) {
  struct mallinfo mi;
  KEEP(mi = d_mallinfo());
  (void)mi;
  int rc;
  KEEP_IF(rc == 1, rc = d_mallopt(M_TRIM_THRESHOLD, 1 << 20));
  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  KEEP_IF(rc == 0, rc = d_malloc_info(0, f));
  fclose(f);
  free(buf);
  size_t seen = 0;
  KEEP_IF(rc == 0, rc = d_malloc_iterate(0, 0, count, &seen));
  KEEP_IF(rc == 0, rc = d_iterate(0, 0, count, &seen));
  KEEP(d_malloc_disable());
  KEEP(d_malloc_enable());

  uint8_t* info = NULL;
  size_t overall = 0, info_size = 0, total = 0, bt = 0;
  KEEP_IF(info != NULL,
          d_get_malloc_leak_info(&info, &overall, &info_size, &total, &bt));
  KEEP(d_free_malloc_leak_info(info));
  void* p = d_malloc(10);
  uintptr_t frames[8];
  ssize_t n;
  KEEP_IF(n > 0, n = d_malloc_backtrace(p, frames, 8));
  d_free(p);
  FILE* out = fopen("/dev/null", "w");
  bool ok;
  KEEP_IF(ok, ok = d_write_malloc_leak_info(out));
  fclose(out);
  char path[4096];
  snprintf(path, sizeof(path), "%s/heap.txt", dir);
  KEEP(d_dump_heap(path));
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc < 3) return 2;
  const char* dir = argc > 3 ? argv[3] : "/tmp";
  load(argv[1]);
  bool ok;
  KEEP_IF(ok, ok = d_initialize(&native, &zygote_child, argv[2]));
  CHECK(ok);

  // First calls: every table still empty.
  round_of_calls(0);
  queries(dir);

  // Growth: many live blocks, each table doubling several times.
  enum { LIVE = 30000 };
  static void* live[LIVE];
  for (unsigned i = 0; i < LIVE; i++) {
    KEEP(live[i] = d_malloc(8 + i % 700));
    CHECK(live[i] != NULL);
    if (i % 1000 == 0) round_of_calls(i);
  }
  queries(dir);

  // The signal-driven work runs inside the next allocation call (heap dump, record file,
  // allocator stats, unreachable check): that call must still leave errno alone.
  int sigs[] = {SIGRTMAX - 17, SIGRTMAX - 18, SIGRTMAX - 15, SIGRTMAX - 16, SIGRTMAX - 19};
  for (unsigned s = 0; s < sizeof(sigs) / sizeof(sigs[0]); s++) {
    struct sigaction old;
    sigaction(sigs[s], NULL, &old);
    if (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN) continue;  // option not set
    raise(sigs[s]);
    void* p;
    KEEP(p = d_malloc(32));
    KEEP(d_free(p));
  }

  for (unsigned i = 0; i < LIVE; i++) {
    if (i % 2 == 0) KEEP(live[i] = d_realloc(live[i], 16 + i % 900));
    KEEP(d_free(live[i]));
  }
  round_of_calls(1);
  queries(dir);

  // Leaks for the exit report, then finalize (leak report, free_track verification).
  for (unsigned i = 0; i < 50; i++) d_malloc(100 + i);
  KEEP(d_finalize());
  printf("errno checks %d clobbered %d\n", checks, clobbered);
  return 0;
}
