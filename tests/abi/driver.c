// Plays bionic's part without the front: dlopens libc_malloc_debug.so, resolves every debug_
// name, builds a MallocDispatch from glibc's allocator and drives one scenario per process.
// Usage: driver LIB SCENARIO [OPTIONS]
#include "bionic.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>

struct seen {
  uintptr_t wanted;
  int found;
};
static void count_if_live(uintptr_t base, size_t size, void* arg) {
  struct seen* s = arg;
  if (base == s->wanted && size >= 24) s->found++;
}

// Every entry point in pass-through form, with the size and errno rules of
// docs/spec/allocation.md#size-limits-and-errno.
static void surface(void) {
  void* p = d_malloc(0);
  CHECK(p != NULL && d_malloc_usable_size(p) >= 1);
  d_free(p);
  d_free(NULL);

  errno = 0;
  CHECK(d_malloc((size_t)1 << 31) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(d_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(d_calloc((size_t)1 << 16, (size_t)1 << 15) == NULL && errno == ENOMEM);
  unsigned char* z = d_calloc(10, 10);
  CHECK(z != NULL);
  for (int i = 0; i < 100; i++) CHECK(z[i] == 0);
  d_free(z);
  z = d_calloc(0, 10);
  CHECK(z != NULL);
  d_free(z);

  p = d_memalign(64, 100);
  CHECK(p != NULL && ((uintptr_t)p & 63) == 0);
  d_free(p);
  errno = 0;
  CHECK(d_memalign(64, (size_t)1 << 31) == NULL && errno == ENOMEM);

  errno = 0;
  CHECK(d_aligned_alloc(0, 16) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(d_aligned_alloc(16, 17) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(d_aligned_alloc(24, 48) == NULL && errno == EINVAL);
  p = d_aligned_alloc(256, 512);
  CHECK(p != NULL && ((uintptr_t)p & 255) == 0);
  d_free(p);

  void* out = (void*)0x1234;
  errno = 42;
  CHECK(d_posix_memalign(&out, 3, 10) == EINVAL && out == (void*)0x1234 && errno == 42);
  CHECK(d_posix_memalign(&out, sizeof(void*) / 2, 10) == EINVAL);
  CHECK(d_posix_memalign(&out, 128, 10) == 0 && ((uintptr_t)out & 127) == 0 && errno == 42);
  d_free(out);
  CHECK(d_posix_memalign(&out, 128, (size_t)1 << 31) == ENOMEM && errno == 42);

  char* r = d_realloc(NULL, 10);
  CHECK(r != NULL);
  memcpy(r, "abcdefghi", 10);
  r = d_realloc(r, 100000);
  CHECK(r != NULL && strcmp(r, "abcdefghi") == 0);
  errno = 0;
  CHECK(d_realloc(r, (size_t)1 << 31) == NULL && errno == ENOMEM);
  r = d_realloc(r, 5);
  CHECK(r != NULL && memcmp(r, "abcde", 5) == 0);
  CHECK(d_realloc(r, 0) == NULL);

  struct mallinfo mi = d_mallinfo();
  CHECK(mi.arena >= 0);
  CHECK(d_mallopt(M_PURGE_ALL_VALUE, 0) == mallopt(M_PURGE_ALL_VALUE, 0));

  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  CHECK(d_malloc_info(0, f) == 0);
  fclose(f);
  CHECK(strstr(buf, "<malloc version=") != NULL);
  free(buf);

  // Without tracking the native iterate answers (the driver's native one fails); with
  // tracking every live allocation is reported with its user pointer.
  void* live = d_malloc(24);
  struct seen s = {(uintptr_t)live, 0};
  int rc = d_malloc_iterate(0, 0, count_if_live, &s);
  CHECK((rc == -1 && s.found == 0) || (rc == 0 && s.found == 1));
  s.found = 0;
  int rc9 = d_iterate(0, 0, count_if_live, &s);
  CHECK(rc9 == rc);
  d_free(live);
  d_malloc_disable();
  d_malloc_enable();
  printf("surface ok\n");
}

static void leak_api(void) {
  uint8_t* info = (uint8_t*)1;
  size_t overall = 1, info_size = 1, total = 1, bt = 1;
  d_get_malloc_leak_info(NULL, &overall, &info_size, &total, &bt);
  CHECK(overall == 1);
  d_get_malloc_leak_info(&info, &overall, &info_size, &total, &bt);
  CHECK(info == NULL && overall == 0 && info_size == 0 && total == 0 && bt == 0);
  d_free_malloc_leak_info(NULL);
  uintptr_t frames[4];
  void* p = d_malloc(10);
  CHECK(d_malloc_backtrace(p, frames, 4) == 0);
  d_free(p);
  CHECK(d_write_malloc_leak_info(stdout) == false);
  printf("leak api ok\n");
}

static volatile int stop_threads;
static void* churn(void* arg) {
  (void)arg;
  unsigned long n = 0;
  while (!stop_threads || n < 100000) {
    void* p = d_malloc(16 + n % 200);
    memset(p, 1, 16);
    d_free(p);
    n++;
  }
  return NULL;
}

// debug_finalize while other threads keep allocating: they neither crash nor hang, and a second
// finalize is a no-op.
static void finalize_while_allocating(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, NULL);
  usleep(20000);
  d_finalize();
  d_finalize();
  stop_threads = 1;
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  void* p = d_malloc(10);
  CHECK(p != NULL);
  d_free(p);
  printf("finalize ok\n");
}

// reallocarray (Android 17's entry) with the rules of
// docs/spec/android-versions.md#android-17-reallocarray: n * size bytes
// through realloc, ENOMEM when the product overflows, errno kept on success; with a backtrace
// option the first frame is the caller's, not the library's.
static void reallocarray_semantics(const char* options) {
  errno = 42;
  char* p = d_reallocarray(NULL, 10, 10);
  CHECK(p != NULL && errno == 42 && d_malloc_usable_size(p) >= 100);
  memcpy(p, "abcdefghi", 10);
  p = d_reallocarray(p, 1000, 100);
  CHECK(p != NULL && strcmp(p, "abcdefghi") == 0 && d_malloc_usable_size(p) >= 100000);
  CHECK(errno == 42);
  // Products that overflow, also to a small value (2^(bits-1) + 1 times 2 wraps to 2).
  const size_t half = ((size_t)1 << (sizeof(size_t) * 8 - 1)) + 1;
  errno = 0;
  CHECK(d_reallocarray(p, half, 2) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(d_reallocarray(p, 2, half) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(d_reallocarray(p, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
  CHECK(strcmp(p, "abcdefghi") == 0);  // a failed call leaves the block alone
  errno = 0;
  // No overflow, but more than realloc gives: realloc's own failure.
  CHECK(d_reallocarray(p, (size_t)1 << 16, (size_t)1 << 15) == NULL && errno == ENOMEM);
  p = d_reallocarray(p, 5, 1);
  CHECK(p != NULL && memcmp(p, "abcde", 5) == 0);
  if (strstr(options, "backtrace") != NULL) {
    uintptr_t frames[8];
    ssize_t n = d_malloc_backtrace(p, frames, 8);
    Dl_info caller, here;
    CHECK(n >= 1 && dladdr((void*)frames[0], &caller) != 0 && dladdr((void*)&reallocarray_semantics, &here) != 0);
    CHECK(strcmp(caller.dli_fname, here.dli_fname) == 0);
  }
  CHECK(d_reallocarray(p, 0, 10) == NULL);  // realloc(p, 0): freed
  printf("reallocarray ok\n");
}

// A native table whose every entry says which slot it was called through (then does the work
// with glibc), in the layout MALLOC_DEBUG_TEST_LAYOUT asks for.
static const char* hit = "";
static const char* nested_hit = "";
static int nest_in_calloc;
static void* t_calloc(size_t n, size_t s) {
  if (nest_in_calloc) {
    // Called by the library while this thread is inside it: debug calls are disabled here.
    nest_in_calloc = 0;
    void* r = d_reallocarray(NULL, 3, 5);
    nested_hit = hit;
    free(r);
  }
  hit = "calloc";
  return calloc(n, s);
}
static void t_free(void* p) { hit = "free"; free(p); }
static struct mallinfo t_mallinfo(void) { hit = "mallinfo"; return mallinfo(); }
static void* t_malloc(size_t s) { hit = "malloc"; return malloc(s); }
static size_t t_usable(const void* p) { hit = "malloc_usable_size"; return malloc_usable_size((void*)p); }
static void* t_memalign(size_t a, size_t s) { hit = "memalign"; return memalign(a, s); }
static int t_posix_memalign(void** out, size_t a, size_t s) { hit = "posix_memalign"; return posix_memalign(out, a, s); }
static void* t_realloc(void* p, size_t s) { hit = "realloc"; return realloc(p, s); }
static void* t_reallocarray(void* p, size_t n, size_t s) { hit = "reallocarray"; return reallocarray(p, n, s); }
static int t_iterate(uintptr_t b, size_t s, void (*cb)(uintptr_t, size_t, void*), void* arg) {
  hit = "malloc_iterate";
  return no_iterate(b, s, cb, arg);
}
static void t_disable(void) { hit = "malloc_disable"; }
static void t_enable(void) { hit = "malloc_enable"; }
static int t_mallopt(int p, int v) { hit = "mallopt"; return mallopt(p, v); }
static void* t_aligned_alloc(size_t a, size_t s) { hit = "aligned_alloc"; return aligned_alloc(a, s); }
static int t_malloc_info(int o, FILE* f) { hit = "malloc_info"; return malloc_info(o, f); }

#define TRACING_FIELDS                                                                       \
  .calloc = t_calloc, .free = t_free, .mallinfo = t_mallinfo, .malloc = t_malloc,            \
  .malloc_usable_size = t_usable, .memalign = t_memalign, .posix_memalign = t_posix_memalign, \
  .realloc = t_realloc, .malloc_iterate = t_iterate, .malloc_disable = t_disable,            \
  .malloc_enable = t_enable, .mallopt = t_mallopt, .aligned_alloc = t_aligned_alloc,         \
  .malloc_info = t_malloc_info
static MallocDispatch tracing = {TRACING_FIELDS};
static MallocDispatch17 tracing17 = {TRACING_FIELDS, .reallocarray = t_reallocarray};

static int init_tracing(const char* options) {
  const char* layout = getenv("MALLOC_DEBUG_TEST_LAYOUT");
  const MallocDispatch* table = (layout != NULL && strcmp(layout, "17") == 0)
                                    ? (const MallocDispatch*)&tracing17
                                    : &tracing;
  return d_initialize(table, &zygote_child, options);
}

// Every pass-through entry reaches the slot of its own name.
static void slots(void) {
  d_mallopt(M_PURGE_ALL_VALUE, 0);
  printf("mallopt -> %s\n", hit);
  d_mallinfo();
  printf("mallinfo -> %s\n", hit);
  FILE* f = fopen("/dev/null", "w");
  d_malloc_info(0, f);
  printf("malloc_info -> %s\n", hit);
  fclose(f);
  struct seen s = {0, 0};
  d_malloc_iterate(0, 0, count_if_live, &s);
  printf("malloc_iterate -> %s\n", hit);
  d_malloc_disable();
  printf("malloc_disable -> %s\n", hit);
  d_malloc_enable();
  printf("malloc_enable -> %s\n", hit);
}

// reallocarray called while debug calls are disabled on the thread (the library is inside
// get_malloc_leak_info, getting its buffer from the native calloc) goes to the native table.
static void nested(void) {
  void* live = d_malloc(10);
  uint8_t* info;
  size_t overall, info_size, total, bt;
  nest_in_calloc = 1;
  d_get_malloc_leak_info(&info, &overall, &info_size, &total, &bt);
  CHECK(nest_in_calloc == 0 && info != NULL);
  printf("nested reallocarray -> %s\n", nested_hit);
  d_free_malloc_leak_info(info);
  d_free(live);
}

// A debug_initialize that fails at its last step (the free_track queue's mapping, refused by a
// tight RLIMIT_AS) after the options' copy, the log file, the suppressions, the signal handlers
// and record_allocs' ring were set up: prints what it left behind, then initialises again.
static long native_live;
static void* counting_malloc(size_t s) {
  void* p = malloc(s);
  if (p != NULL) native_live++;
  return p;
}
static void counting_free(void* p) {
  if (p != NULL) native_live--;
  free(p);
}
static MallocDispatch counting;

static int count_descriptors(void) {
  DIR* d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}
static int count_mappings(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  int n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}
static long vm_size_bytes(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = 0;
  while (fgets(line, sizeof(line), f) != NULL) sscanf(line, "VmSize: %ld kB", &kb);
  fclose(f);
  return kb * 1024;
}
static const char* handler_of(int sig) {
  struct sigaction sa;
  sigaction(sig, NULL, &sa);
  return sa.sa_handler == SIG_DFL ? "default" : "installed";
}

static void late_failure(const char* options, const char* retry_options) {
  count_descriptors();  // first uses of stdio and opendir: their buffers are not ours
  count_mappings();
  vm_size_bytes();
  int descriptors = count_descriptors();
  int mappings = count_mappings();
  counting = native;
  counting.malloc = counting_malloc;
  counting.free = counting_free;
  struct rlimit old;
  CHECK(getrlimit(RLIMIT_AS, &old) == 0);
  struct rlimit tight = {(rlim_t)vm_size_bytes() + (16 << 20), old.rlim_max};
  CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
  int first = d_initialize(&counting, &zygote_child, options);
  CHECK(setrlimit(RLIMIT_AS, &old) == 0);
  printf("first=%d\n", first);
  printf("native blocks left=%ld\n", native_live);
  printf("descriptors left=%d\n", count_descriptors() - descriptors);
  printf("mappings left=%d\n", count_mappings() - mappings);
  printf("record signal=%s\n", handler_of(SIGRTMAX - 18));
  // libc retries with the same table (the library keeps its copy of the first one it saw).
  printf("second=%d\n", d_initialize(&counting, &zygote_child, retry_options));
  void* p = d_malloc(10);
  CHECK(p != NULL);
  d_free(p);
  printf("record signal=%s\n", handler_of(SIGRTMAX - 18));
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc < 3) return 2;
  const char* options = argc > 3 ? argv[3] : "";
  load(argv[1]);
  const char* scenario = argv[2];
  if (strcmp(scenario, "init") == 0) {
    init(options);
  } else if (strcmp(scenario, "null-args") == 0) {
    printf("null zygote=%d\n", d_initialize(native_table(), NULL, options));
    printf("null options=%d\n", d_initialize(native_table(), &zygote_child, NULL));
    init(options);
  } else if (strcmp(scenario, "int-zygote") == 0) {
    static int zygote_int;
    printf("initialize=%d\n", d_initialize(native_table(), (bool*)&zygote_int, options));
    void* p = d_malloc(10);
    CHECK(p != NULL);
    d_free(p);
  } else if (strcmp(scenario, "options-copied") == 0) {
    // libc passes a stack buffer on the property path: it is dead after the call.
    char stack_options[92];
    snprintf(stack_options, sizeof(stack_options), "%s", options);
    CHECK(init(stack_options));
    memset(stack_options, 'X', sizeof(stack_options) - 1);
    void* p = d_malloc(1);
    printf("usable=%zu\n", d_malloc_usable_size(p));
    d_free(p);
  } else if (strcmp(scenario, "surface") == 0) {
    CHECK(init(options));
    surface();
    leak_api();
    d_finalize();
    d_finalize();
  } else if (strcmp(scenario, "finalize-threads") == 0) {
    CHECK(init(options));
    finalize_while_allocating();
  } else if (strcmp(scenario, "reallocarray") == 0) {
    CHECK(init(options));
    reallocarray_semantics(options);
  } else if (strcmp(scenario, "slots") == 0) {
    CHECK(init_tracing(options));
    slots();
  } else if (strcmp(scenario, "nested") == 0) {
    CHECK(init_tracing(options));
    nested();
  } else if (strcmp(scenario, "twice") == 0) {
    CHECK(init(options));
    printf("second=%d\n", d_initialize(native_table(), &zygote_child, options));
  } else if (strcmp(scenario, "late-failure") == 0) {
    CHECK(argc > 4);
    late_failure(options, argv[4]);
  } else {
    printf("unknown scenario %s\n", scenario);
    return 2;
  }
  return 0;
}
