// Allocation-time detection through the C ABI, the way bionic drives the library: one scenario
// per process. Prints facts on stdout ("name value" lines); the log goes to stderr.
// Usage: driver LIB SCENARIO OPTIONS
#include "../abi/bionic.h"

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static int all_bytes(const unsigned char* p, size_t from, size_t to, unsigned char v) {
  for (size_t i = from; i < to; i++)
    if (p[i] != v) return 0;
  return 1;
}

static struct { uintptr_t base; size_t size; } seen[1024];
static int seen_count;
static void record_block(uintptr_t base, size_t size, void* arg) {
  (void)arg;
  if (seen_count < 1024) {
    seen[seen_count].base = base;
    seen[seen_count].size = size;
  }
  seen_count++;
}
static int iterated;
static void count_block(uintptr_t base, size_t size, void* arg) {
  (void)base; (void)size; (void)arg;
  iterated++;
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  load(argv[1]);
  const char* s = argv[2];
  if (!init(argv[3])) return 1;
  alarm(20);  // a deadlock fails the scenario instead of hanging the test
  if (strcmp(s, "fill") == 0) {
    unsigned char* p = d_malloc(40);
    printf("alloc_filled %d\n", all_bytes(p, 0, 40, 0xeb));
    unsigned char* c = d_calloc(1, 40);
    printf("calloc_zero %d\n", all_bytes(c, 0, 40, 0));
    memset(p, 1, 40);
    p = d_realloc(p, 4000);
    printf("realloc_kept %d grown_filled %d\n", all_bytes(p, 0, 40, 1), all_bytes(p, 40, 4000, 0xeb));
    d_free(c);
    d_free(p);
  } else if (strcmp(s, "fill_limit") == 0) {
    unsigned char* p = d_malloc(40);
    printf("head %d tail_untouched %d\n", all_bytes(p, 0, 8, 0xeb), !all_bytes(p, 8, 40, 0xeb));
    d_free(p);
  } else if (strcmp(s, "expand") == 0) {
    void* p = d_malloc(10);
    printf("usable_at_least_26 %d\n", d_malloc_usable_size(p) >= 26);
    d_free(p);
  } else if (strcmp(s, "free_fill") == 0) {
    unsigned char* p = d_malloc(100);
    size_t usable = d_malloc_usable_size(p);
    d_free(p);  // held in the free_track queue: still readable
    printf("freed_filled %d\n", all_bytes(p, 0, usable, 0xef));
  } else if (strcmp(s, "write_after_free") == 0) {
    unsigned char* p = d_malloc(100);
    d_free(p);
    p[0] = 'x';
    p[99] = 'y';
    printf("p %p\n", (void*)p);
    d_finalize();  // verifies the queue
  } else if (strcmp(s, "tag_after_free") == 0) {
    unsigned char* p = d_malloc(100);
    d_free(p);
    // LP64 with `guard`: the header starts 64 bytes before the user pointer.
    memset(p - 64, 0, 4);
    printf("p %p\n", (void*)p);
    d_finalize();
  } else if (strcmp(s, "freed_pointer_calls") == 0) {
    void* p = d_malloc(100);
    d_free(p);
    printf("p %p\n", p);
    printf("usable %zu\n", d_malloc_usable_size(p));
    printf("realloc_null %d\n", d_realloc(p, 10) == NULL);
  } else if (strcmp(s, "unknown_pointers") == 0) {
    char* block = d_malloc(64);
    char local = 0;
    void* unmapped = (void*)0x1000;
    printf("p %p %p %p\n", unmapped, (void*)(block + 16), (void*)&local);
    d_free(unmapped);
    printf("realloc_null %d\n", d_realloc(block + 16, 10) == NULL);
    printf("usable %zu\n", d_malloc_usable_size(&local));
    d_free(block);
  } else if (strcmp(s, "leaks") == 0) {
    void* a = d_malloc(10);
    void* b = d_malloc(300);
    void* c = d_malloc(20);
    KEEP(a); KEEP(b); KEEP(c);
    printf("p %p %p %p\n", b, c, a);
    d_finalize();
  } else if (strcmp(s, "limits") == 0) {
    // (Results are taken before printing: argument evaluation order would race errno.)
    errno = 0;
    int failed = d_malloc((size_t)1 << 31) == NULL, e = errno;
    printf("malloc_2g %d %d\n", failed, e == ENOMEM);
    errno = 0;
    failed = d_calloc((size_t)1 << 62, 8) == NULL, e = errno;
    printf("calloc_overflow %d %d\n", failed, e == ENOMEM);
    void* out = (void*)1;
    printf("posix_memalign_3 %d\n", d_posix_memalign(&out, 3, 10) == EINVAL);
    errno = 0;
    failed = d_aligned_alloc(0, 16) == NULL, e = errno;
    printf("aligned_alloc_0 %d %d\n", failed, e == EINVAL);
    void* big = d_memalign(4096, 100);
    printf("memalign_4096 %d %d\n", ((uintptr_t)big & 4095) == 0, d_malloc_usable_size(big) >= 100);
    d_free(big);
    void* odd = d_memalign(24, 10);  // not a power of two: rounded up
    printf("memalign_24 %d\n", odd != NULL && ((uintptr_t)odd & 31) == 0);
    d_free(odd);
    void* zero = d_malloc(0);
    printf("malloc_0 %d\n", zero != NULL);
    d_free(zero);
  } else if (strcmp(s, "iterate_disabled") == 0) {
    void* p[3] = {d_malloc(10), d_malloc(20), d_malloc(30)};
    d_malloc_disable();
    d_malloc_iterate(0, ~(uintptr_t)0, count_block, NULL);
    d_malloc_enable();
    printf("iterated_at_least_3 %d\n", iterated >= 3);
    for (int i = 0; i < 3; i++) d_free(p[i]);
  } else if (strcmp(s, "iterate_exact") == 0) {
    /* 300 blocks of different sizes, every third freed (and a realloc'd, a calloc'd and an
     * aligned one): each iteration, with the allocator disabled and while it runs, must report
     * each live block once with its usable size, and nothing else. */
    enum { N = 300 };
    void* p[N];
    for (int i = 0; i < N; i++) p[i] = d_malloc((size_t)(1 + i * 13 % 700));
    for (int i = 0; i < N; i += 3) { d_free(p[i]); p[i] = NULL; }
    p[1] = d_realloc(p[1], 5000);
    d_free(p[2]);
    p[2] = d_calloc(3, 40);
    d_free(p[4]);
    p[4] = d_memalign(64, 100);
    for (int pass = 0; pass < 2; pass++) {
      seen_count = 0;
      if (pass == 0) d_malloc_disable();
      d_malloc_iterate(0, ~(uintptr_t)0, record_block, NULL);
      if (pass == 0) d_malloc_enable();
      int exact = 1, live = 0;
      for (int i = 0; i < N; i++) {
        if (!p[i]) continue;
        live++;
        int found = 0;
        for (int j = 0; j < seen_count; j++)
          if (seen[j].base == (uintptr_t)p[i])
            found += seen[j].size == d_malloc_usable_size(p[i]) ? 1 : 100;
        if (found != 1) exact = 0;
      }
      printf("iterate_exact %s %d\n", pass == 0 ? "disabled" : "running",
             exact && seen_count == live);
    }
    for (int i = 0; i < N; i++) d_free(p[i]);
  } else {
    printf("unknown scenario %s\n", s);
    return 2;
  }
  return 0;
}
