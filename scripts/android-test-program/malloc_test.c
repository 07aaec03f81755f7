/* A small bionic program for running libc_malloc_debug.so under real Android libc.
 * Usage: malloc_test [leak|bugs|fork|record]
 * Exercises malloc/calloc/realloc/posix_memalign/malloc_usable_size/free, prints one line per
 * check to stdout and "malloc_test: done" at the end, and leaves through exit(0) so that libc's
 * exit-time malloc debug hook (debug_finalize) runs. With "leak", one 1234-byte allocation is
 * left live (for leak_track). With "fork", see fork_test. With "record", SIGRTMAX-18 (46) is
 * raised and the program leaves through _exit without allocating: the record_allocs file must
 * have been written by the signal's handler. Prototypes are declared by hand: no
 * bionic headers here. */

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
extern int pthread_create(unsigned long* thread, const void* attr, void* (*start)(void*), void* arg);
extern int pthread_join(unsigned long thread, void** result);
extern int fork(void);
extern int waitpid(int pid, int* status, int options);
extern int kill(int pid, int sig);
extern int usleep(unsigned int usec);
extern void _exit(int status) __attribute__((noreturn));
extern int getpid(void);

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

#include "../../tests/programs/call_sites.h"

static int stop_churn;

static void* churn_sites(void* arg) {
  (void)arg;
  for (unsigned i = 0; !__atomic_load_n(&stop_churn, __ATOMIC_RELAXED); i += CALL_SITE_STRIDE) {
    void* p = alloc_at_site(i);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
  return 0;
}

// Reached only in fork children: a return address the parent never unwound through, so the
// child's first allocation misses the inherited rule cache and needs the loader's lock. A child
// forked while the other thread held that lock (inside a stack walk) would wait for ever.
__attribute__((noinline)) static void child_allocates(void) {
  void* p = malloc(100);
  __asm__ volatile("" : : "r"(p) : "memory");
  free(p);
}

// 300 forks while another thread walks stacks; a child that has not exited 5 s after its fork is
// killed and counted. Prints "forks N hung M".
static void fork_test(void) {
  unsigned long t;
  pthread_create(&t, 0, churn_sites, 0);
  int reaped = 0, hung = 0;
  for (int i = 0; i < 300; i++) {
    int pid = fork();
    if (pid == 0) {
      child_allocates();
      _exit(0);
    }
    int status = 0, done = 0;
    for (int waited = 0; pid > 0 && waited < 5000 && !done; waited++) {
      done = waitpid(pid, &status, 1 /* WNOHANG */) == pid;
      if (!done) usleep(1000);
    }
    if (done) {
      reaped++;
    } else if (pid > 0) {
      kill(pid, 9);
      waitpid(pid, &status, 0);
      hung++;
    }
  }
  __atomic_store_n(&stop_churn, 1, __ATOMIC_RELAXED);
  pthread_join(t, 0);
  dprintf(1, "forks %d hung %d\n", reaped, hung);
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

  if (argc > 1 && strcmp(argv[1], "fork") == 0) fork_test();

  if (argc > 1 && strcmp(argv[1], "record") == 0) {
    kill(getpid(), 46);
    dprintf(1, "malloc_test: %s\n", failures == 0 ? "done" : "FAILED");
    _exit(failures == 0 ? 0 : 1);
  }

  dprintf(1, "malloc_test: %s\n", failures == 0 ? "done" : "FAILED");
  exit(failures == 0 ? 0 : 1);
}
