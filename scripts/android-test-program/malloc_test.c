/* A small bionic program for running libc_malloc_debug.so under real Android libc.
 * Usage: malloc_test [leak]
 * Exercises malloc/calloc/realloc/posix_memalign/malloc_usable_size/free, prints one line per
 * check to stdout and "malloc_test: done" at the end, and leaves through exit(0) so that libc's
 * exit-time malloc debug hook (debug_finalize) runs. With "leak", one 1234-byte allocation is
 * left live (for leak_track). Prototypes are declared by hand: no bionic headers here. */

typedef unsigned long size_t;

extern void* malloc(size_t size);
extern void* calloc(size_t n, size_t size);
extern void* realloc(void* p, size_t size);
extern void free(void* p);
extern int posix_memalign(void** out, size_t alignment, size_t size);
extern size_t malloc_usable_size(const void* p);
extern int dprintf(int fd, const char* fmt, ...);
extern int strcmp(const char* a, const char* b);
extern void* memset(void* p, int c, size_t n);
extern void exit(int status) __attribute__((noreturn));
extern const char* getprogname(void);

static int failures;

// The "bugs" mode's faults, in named functions so the reports' backtraces can be checked.
__attribute__((noinline)) void* leak_here(size_t n) {
  void* p = malloc(n);
  __asm__ volatile("" ::: "memory");
  return p;
}

__attribute__((noinline)) void overflow_here(void) {
  unsigned char* p = malloc(100);
  // One byte past the end: the rear guard catches it at free.
  ((volatile unsigned char*)p)[100] = 0;
  free(p);
}

static void check(const char* what, int ok) {
  dprintf(1, "%s: %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) failures++;
}

int main(int argc, char** argv, char** envp) {
  (void)envp;
  // malloc debug's log lines start with this name; its form differs between bionic releases.
  dprintf(1, "progname: %s\n", getprogname());
  unsigned char* p = malloc(100);
  check("malloc(100)", p != 0);
  if (p == 0) exit(1);
  memset(p, 0x5a, 100);
  check("malloc_usable_size >= 100", malloc_usable_size(p) >= 100);

  unsigned char* q = realloc(p, 1000);
  int kept = q != 0;
  for (int i = 0; kept && i < 100; i++) kept = q[i] == 0x5a;
  check("realloc(1000) keeps contents", kept);
  if (q == 0) exit(1);
  q = realloc(q, 10);
  kept = q != 0;
  for (int i = 0; kept && i < 10; i++) kept = q[i] == 0x5a;
  check("realloc(10) keeps contents", kept);
  free(q);

  unsigned char* z = calloc(10, 10);
  int zero = z != 0;
  for (int i = 0; zero && i < 100; i++) zero = z[i] == 0;
  check("calloc(10, 10) zeroed", zero);
  free(z);

  void* a = 0;
  int rc = posix_memalign(&a, 64, 200);
  check("posix_memalign(64, 200)", rc == 0 && a != 0 && ((unsigned long)a & 63) == 0);
  free(a);

  void* many[64];
  for (int i = 0; i < 64; i++) many[i] = malloc((size_t)(i * 37 + 1));
  int all = 1;
  for (int i = 0; i < 64; i++) all = all && many[i] != 0;
  check("64 mallocs", all);
  for (int i = 0; i < 64; i++) free(many[i]);

  free(0);
  check("free(NULL)", 1);

  if (argc > 1 && strcmp(argv[1], "leak") == 0) {
    void* leaked = malloc(1234);
    check("leaked malloc(1234)", leaked != 0);
  }

  if (argc > 1 && strcmp(argv[1], "bugs") == 0) {
    overflow_here();
    check("leaked malloc(1234)", leak_here(1234) != 0);
  }

  dprintf(1, "malloc_test: %s\n", failures == 0 ? "done" : "FAILED");
  exit(failures == 0 ? 0 : 1);
}
