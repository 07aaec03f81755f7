// Test program for the glibc front. Usage: probe SCENARIO [ARG]
//   maps SUBSTR  print whether a mapping's path contains SUBSTR, then allocate a little
//   leak         drive bionic's leak API exported by the front (found with dlsym)
//   zygote       android_mallopt(M_SET_ZYGOTE_CHILD) then get_malloc_leak_info
//   early LIB    call fake_early_check() of the already loaded library LIB
//   threads LIB  call fake_join_threads() of the already loaded library LIB
//   api          malloc family semantics through the front
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "malloc_debug.h"

#define CHECK(cond)                                            \
  do {                                                         \
    if (!(cond)) {                                             \
      printf("FAILED line %d: %s\n", __LINE__, #cond);         \
      fflush(stdout);                                          \
      exit(1);                                                 \
    }                                                          \
  } while (0)

typedef void (*get_leak_t)(uint8_t**, size_t*, size_t*, size_t*, size_t*);
typedef void (*free_leak_t)(uint8_t*);
typedef ssize_t (*backtrace_t)(void*, uintptr_t*, size_t);
typedef bool (*write_leak_t)(FILE*);
typedef bool (*android_mallopt_t)(int, void*, size_t);

static void* need(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  if (f == NULL) {
    printf("missing %s\n", name);
    exit(3);
  }
  return f;
}

static int maps(const char* needle) {
  FILE* f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL);
  char line[4096];
  bool found = false;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strstr(line, needle) != NULL) found = true;
  }
  fclose(f);
  printf("mapped=%s\n", found ? "yes" : "no");
  char* s = strdup("hello");
  CHECK(s != NULL && strcmp(s, "hello") == 0);
  free(s);
  printf("alloc ok\n");
  return 0;
}

static int leak(void) {
  get_leak_t get_leak = (get_leak_t)need("get_malloc_leak_info");
  free_leak_t free_leak = (free_leak_t)need("free_malloc_leak_info");
  backtrace_t bt = (backtrace_t)need("malloc_backtrace");
  write_leak_t write_leak = (write_leak_t)need("write_malloc_leak_info");
  android_mallopt_t mallopt_ = (android_mallopt_t)need("android_mallopt");

  uint8_t* info = (uint8_t*)1;
  size_t overall = 7, info_size = 7, total = 7, frames = 7;
  get_leak(NULL, &overall, &info_size, &total, &frames);
  printf("null-arg untouched=%d\n", overall == 7);
  get_leak(&info, &overall, &info_size, &total, &frames);
  printf("leak info=%s overall=%zu info_size=%zu total=%zu backtrace_size=%zu\n",
         info == NULL ? "null" : "set", overall, info_size, total, frames);
  if (info != NULL) {
    const MallocDebugLeakRecord* r = (const MallocDebugLeakRecord*)info;
    printf("record size=%zu num=%zu frames=%#zx,%#zx,%#zx\n", r->size, r->num_allocations,
           (size_t)r->frames[0], (size_t)r->frames[1], (size_t)r->frames[2]);
  }
  free_leak(info);

  void* p = malloc(10);
  uintptr_t f[4] = {0, 0, 0, 0};
  ssize_t n = bt(p, f, 4);
  printf("malloc_backtrace=%zd first=%#zx\n", n, (size_t)f[0]);
  free(p);

  errno = 0;
  bool written = write_leak(stdout);
  printf("write_malloc_leak_info=%d enotsup=%d\n", written, errno == ENOTSUP);

  android_mallopt_leak_info_t li;
  memset(&li, 0, sizeof(li));
  errno = 0;
  bool ok = mallopt_(MALLOC_DEBUG_M_GET_MALLOC_LEAK_INFO, &li, sizeof(li));
  printf("android_mallopt get=%d errno_enotsup=%d overall=%zu\n", ok, errno == ENOTSUP,
         li.overall_size);
  if (ok) {
    ok = mallopt_(MALLOC_DEBUG_M_FREE_MALLOC_LEAK_INFO, &li, sizeof(li));
    printf("android_mallopt free=%d\n", ok);
  }
  errno = 0;
  ok = mallopt_(MALLOC_DEBUG_M_GET_MALLOC_LEAK_INFO, &li, 3);
  printf("android_mallopt bad size=%d einval=%d\n", ok, errno == EINVAL);
  fflush(stdout);
  errno = 0;
  FILE* out = stdout;
  ok = mallopt_(MALLOC_DEBUG_M_WRITE_MALLOC_LEAK_INFO_TO_FILE, out, sizeof(out));
  printf("android_mallopt write=%d enotsup=%d\n", ok, errno == ENOTSUP);
  return 0;
}

static int zygote(void) {
  android_mallopt_t mallopt_ = (android_mallopt_t)need("android_mallopt");
  get_leak_t get_leak = (get_leak_t)need("get_malloc_leak_info");
  free_leak_t free_leak = (free_leak_t)need("free_malloc_leak_info");
  errno = 0;
  bool ok = mallopt_(MALLOC_DEBUG_M_SET_ZYGOTE_CHILD, &errno, 0);
  printf("set zygote with arg=%d einval=%d\n", ok, errno == EINVAL);
  printf("set zygote=%d\n", mallopt_(MALLOC_DEBUG_M_SET_ZYGOTE_CHILD, NULL, 0));
  uint8_t* info = NULL;
  size_t overall = 0, info_size = 0, total = 0, frames = 0;
  get_leak(&info, &overall, &info_size, &total, &frames);
  CHECK(info != NULL);
  printf("zygote bit=%d\n",
         (((const MallocDebugLeakRecord*)info)->size & MALLOC_DEBUG_ZYGOTE_CHILD_ALLOCATION) != 0);
  free_leak(info);
  return 0;
}

static int early(const char* lib) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
  CHECK(h != NULL);
  int (*check)(void) = (int (*)(void))dlsym(h, "fake_early_check");
  CHECK(check != NULL);
  printf("early check=%d\n", check());
  dlclose(h);
  return 0;
}

// Opaque to the compiler, so that overflowing sizes are not diagnosed at build time.
static volatile size_t huge = SIZE_MAX / 2;

static int threads(const char* lib) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
  CHECK(h != NULL);
  long (*join)(void) = (long (*)(void))dlsym(h, "fake_join_threads");
  CHECK(join != NULL);
  printf("bootstrap threads errors=%ld\n", join());
  dlclose(h);
  return 0;
}

static int api(void) {
  // malloc / malloc_usable_size
  for (size_t size = 0; size < 5000; size += 37) {
    unsigned char* p = malloc(size);
    CHECK(p != NULL);
    CHECK(malloc_usable_size(p) >= size);
    memset(p, 0xab, size);
    free(p);
  }
  CHECK(malloc_usable_size(NULL) == 0);

  // calloc zeroes, including reused memory
  for (int round = 0; round < 50; round++) {
    unsigned char* dirty = malloc(1000);
    memset(dirty, 0xff, 1000);
    free(dirty);
    unsigned char* z = calloc(10, 100);
    CHECK(z != NULL);
    for (int i = 0; i < 1000; i++) CHECK(z[i] == 0);
    free(z);
  }
  errno = 0;
  CHECK(calloc(huge, 3) == NULL && errno == ENOMEM);

  // posix_memalign
  void* out = (void*)0x1234;
  CHECK(posix_memalign(&out, 3, 10) == EINVAL && out == (void*)0x1234);
  CHECK(posix_memalign(&out, sizeof(void*) / 2, 10) == EINVAL && out == (void*)0x1234);
  CHECK(posix_memalign(&out, 24, 10) == EINVAL);
  for (size_t align = sizeof(void*); align <= 65536; align *= 2) {
    CHECK(posix_memalign(&out, align, 100) == 0);
    CHECK(((uintptr_t)out & (align - 1)) == 0);
    memset(out, 1, 100);
    free(out);
  }

  // aligned_alloc / memalign / valloc / pvalloc
  void* p = aligned_alloc(256, 512);
  CHECK(p != NULL && ((uintptr_t)p & 255) == 0);
  free(p);
  // glibc's contract (C17): the size need not be a multiple of the alignment.
  p = aligned_alloc(64, 100);
  CHECK(p != NULL && ((uintptr_t)p & 63) == 0);
  memset(p, 2, 100);
  free(p);
  p = memalign(4096, 10);
  CHECK(p != NULL && ((uintptr_t)p & 4095) == 0);
  free(p);
  long page = sysconf(_SC_PAGESIZE);
  p = valloc(10);
  CHECK(p != NULL && ((uintptr_t)p & (uintptr_t)(page - 1)) == 0);
  free(p);
  p = pvalloc(10);
  CHECK(p != NULL && ((uintptr_t)p & (uintptr_t)(page - 1)) == 0);
  CHECK(malloc_usable_size(p) >= (size_t)page);
  free(p);

  // realloc keeps the contents when growing and shrinking; realloc(NULL) is malloc
  char* r = realloc(NULL, 10);
  CHECK(r != NULL);
  memcpy(r, "abcdefghi", 10);
  r = realloc(r, 100000);
  CHECK(r != NULL && strcmp(r, "abcdefghi") == 0);
  r = realloc(r, 5);
  CHECK(r != NULL && memcmp(r, "abcde", 5) == 0);
  free(r);
  r = reallocarray(NULL, 10, 10);
  CHECK(r != NULL);
  free(r);
  errno = 0;
  CHECK(reallocarray(NULL, huge, 3) == NULL && errno == ENOMEM);

  // mallopt / mallinfo / malloc_info reach glibc
  CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
  struct mallinfo2 mi2 = mallinfo2();
  CHECK(mi2.arena > 0);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo mi = mallinfo();  // the front's: glibc's struct, int fields
#pragma GCC diagnostic pop
  CHECK(mi.arena > 0 && mi.uordblks > 0);
  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  CHECK(malloc_info(0, f) == 0);
  fclose(f);
  CHECK(strstr(buf, "<malloc version=") != NULL);
  free(buf);
  printf("api ok\n");
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc < 2) return 2;
  if (strcmp(argv[1], "maps") == 0 && argc > 2) return maps(argv[2]);
  if (strcmp(argv[1], "leak") == 0) return leak();
  if (strcmp(argv[1], "zygote") == 0) return zygote();
  if (strcmp(argv[1], "early") == 0 && argc > 2) return early(argv[2]);
  if (strcmp(argv[1], "threads") == 0 && argc > 2) return threads(argv[2]);
  if (strcmp(argv[1], "api") == 0) return api();
  printf("unknown scenario\n");
  return 2;
}
