/* A small bionic program for running libc_malloc_debug.so under real Android libc.
 * Usage: malloc_test [leak|bugs|fork|fork-dlopen|fork-dlopen-report|park|unwind|leaks N|errno|record|
 *                    small-stack|spares|unreachable]
 * Exercises malloc/calloc/realloc/posix_memalign/malloc_usable_size/free/mallopt, prints one
 * line per check to stdout and "malloc_test: done" at the end, and leaves through exit(0) so that
 * libc's exit-time malloc debug hook (debug_finalize) runs. With "leak", one 1234-byte allocation
 * is left live (for leak_track). With "leaks N", N blocks of 1..N bytes are left live and fds 0-2
 * are closed before exit, as some programs (and some libcs) do before debug_finalize runs: the
 * exit-time records must still reach the log. With "record", 500 timed mallocs (their clock reads
 * on stderr), then SIGRTMAX-18 (46) is raised and the program leaves through _exit without
 * allocating: the record_allocs file must have been written by the signal's handler. With "errno", see errno_test; "fork", fork_test; "fork-dlopen",
 * fork_dlopen_test; "park" and "unwind", park_test and unwind_test; "small-stack",
 * small_stack_test; "spares", spares_test; "unreachable", unreachable_test. Prototypes are declared by hand: no bionic headers here. */

typedef unsigned long size_t;

extern void* malloc(size_t size);
extern void* calloc(size_t n, size_t size);
extern void* realloc(void* p, size_t size);
extern void free(void* p);
extern int posix_memalign(void** out, size_t alignment, size_t size);
extern size_t malloc_usable_size(const void* p);
extern int mallopt(int param, int value);
extern int dprintf(int fd, const char* fmt, ...);
extern int strcmp(const char* a, const char* b);
extern void* memset(void* p, int c, size_t n);
extern void exit(int status) __attribute__((noreturn));
extern const char* getprogname(void);
extern int pthread_create(unsigned long* thread, const void* attr, void* (*start)(void*), void* arg);
extern int pthread_join(unsigned long thread, void** result);
extern int pthread_attr_init(void* attr);
extern int pthread_attr_setstacksize(void* attr, size_t size);
extern int fork(void);
extern int waitpid(int pid, int* status, int options);
extern int kill(int pid, int sig);
extern int usleep(unsigned int usec);
extern void _exit(int status) __attribute__((noreturn));
extern void* dlopen(const char* name, int flags);
extern int dlclose(void* handle);

extern int getpid(void);
extern int gettid(void);
extern int tgkill(int tgid, int tid, int sig);
typedef void (*sighandler_t)(int);
extern sighandler_t signal(int sig, sighandler_t handler);
struct timespec_ { long tv_sec; long tv_nsec; };
extern int clock_gettime(int clock, struct timespec_* ts);
extern int close(int fd);
extern int* __errno(void);

static int failures;
static void check(const char* what, int ok);

/* "park": bionic's backtrace signal (33) parks a thread that is allocating, the way
 * libbacktrace's ThreadEntry does while another thread unwinds it (its handler waits up to 5 s;
 * ours up to 2 s), and the main thread allocates meanwhile. A library that holds a lock where
 * the signal can land makes the main thread wait for the parked one: such a round takes about
 * 2 s. Prints the number of rounds, the rounds over 1 s and the longest round. */
static volatile int park_worker_tid, parked, park_release, park_stop;

static long now_ms(void) {
  struct timespec_ t;
  clock_gettime(1 /* CLOCK_MONOTONIC */, &t);
  /* Within 32 bits on ILP32 for 24 days of uptime: seconds counted from the first call. */
  static long first_sec = -1;
  if (first_sec < 0) first_sec = t.tv_sec;
  return (t.tv_sec - first_sec) * 1000 + t.tv_nsec / 1000000;
}

/* The native allocator's text (libc's and the vDSO's, which it calls): a thread parked there may hold the allocator's own locks (Scudo's
 * size-class locks), which stalls the main thread with or without malloc debug; the test is
 * about the library's locks, so such a delivery is not parked and the signal is sent again. */
extern int open(const char* path, int flags, ...);
extern long read(int fd, void* buf, size_t n);
extern int close(int fd);
static unsigned long libc_text_start, libc_text_end, vdso_start, vdso_end;
static volatile int native_skips;

static unsigned long hex(const char** p) {
  unsigned long v = 0;
  for (;; (*p)++) {
    char c = **p;
    if (c >= '0' && c <= '9') v = v * 16 + (unsigned long)(c - '0');
    else if (c >= 'a' && c <= 'f') v = v * 16 + (unsigned long)(c - 'a' + 10);
    else return v;
  }
}

static void find_libc_text(void) {
  static char maps[65536];
  int fd = open("/proc/self/maps", 0);
  long n = 0, r;
  while (fd >= 0 && n < (long)sizeof(maps) - 1 && (r = read(fd, maps + n, sizeof(maps) - 1 - n)) > 0) n += r;
  if (fd >= 0) close(fd);
  maps[n] = 0;
  for (char* line = maps; *line;) {
    char* end = line;
    while (*end && *end != '\n') end++;
    const char* p = line;
    unsigned long start = hex(&p);
    p++;
    unsigned long stop = hex(&p);
    int exec = p[3] == 'x';
    int is_libc = 0;
    for (char* q = line; q + 8 <= end; q++)
      if (q[0] == '/' && q[1] == 'l' && q[2] == 'i' && q[3] == 'b' && q[4] == 'c' && q[5] == '.' && q[6] == 's' && q[7] == 'o') is_libc = 1;
    int is_vdso = end - line >= 6 && end[-6] == '[' && end[-5] == 'v' && end[-4] == 'd';
    if (exec && is_libc) { libc_text_start = start; libc_text_end = stop; }
    if (exec && is_vdso) { vdso_start = start; vdso_end = stop; }
    line = *end ? end + 1 : end;
  }
}

/* x86_64: the kernel passes the ucontext to every handler; the interrupted pc is gregs[REG_RIP]
 * (index 16), after uc_flags, uc_link and uc_stack (40 bytes). */
static void park_handler(int sig, void* info, void* ucontext) {
  (void)sig;
  (void)info;
#if defined(__i386__)
  /* i386: after uc_flags, uc_link and uc_stack (20 bytes), gregs[REG_EIP] is index 14. */
  unsigned long pc = ((unsigned long*)((char*)ucontext + 20))[14];
#elif defined(__arm__)
  /* arm: after uc_flags, uc_link and uc_stack (20 bytes), the sigcontext's trap_no, error_code,
   * oldmask and r0-r15: arm_pc is index 18. */
  unsigned long pc = ((unsigned long*)((char*)ucontext + 20))[18];
#else
  unsigned long pc = ((unsigned long*)((char*)ucontext + 40))[16];
#endif
  if ((pc >= libc_text_start && pc < libc_text_end) || (pc >= vdso_start && pc < vdso_end)) {
    native_skips++;
    return;
  }
  long start = now_ms();
  parked = 1;
  while (!park_release && now_ms() - start < 2000) usleep(50);
  parked = 0;
}

/* Frees the worker delays itself, first in first out ("unwind-delayed": free_track's pattern in
 * the program's own code, to run without malloc debug). 0: each block is freed at once. */
#define DELAY_MAX 256
static int delay_frees;
static void* delayed[DELAY_MAX];

static void worker_free(unsigned* next, void* p) {
  if (!delay_frees) {
    free(p);
    return;
  }
  unsigned slot = (*next)++ % (unsigned)delay_frees;
  free(delayed[slot]);
  delayed[slot] = p;
}

static void* park_worker(void* arg) {
  (void)arg;
  park_worker_tid = gettid();
  unsigned next = 0;
  for (unsigned i = 0; !park_stop; i++) {
    void* p = malloc(16 + i % 300);
    p = realloc(p, 64 + i % 900);
    void* q = calloc(1, 24);
    worker_free(&next, p);
    worker_free(&next, q);
  }
  return 0;
}

/* "unwind": the main thread unwinds the allocating worker through the root's real
 * libbacktrace (Backtrace::Create(pid, tid) then Unwind), as ART's ANR dumps do: libbacktrace
 * parks the worker with signal 33 and allocates while it reads the worker's stack. Prints the
 * unwinds, those over 1 s and the longest. */
extern void* dlopen(const char* name, int flags);
extern void* dlsym(void* handle, const char* name);

static void unwind_test(int unwinds) {
  void* lib = dlopen("libbacktrace.so", 2 /* RTLD_NOW */);
  check("dlopen libbacktrace.so", lib != 0);
  if (!lib) return;
  void* (*create)(int, int, void*) = (void* (*)(int, int, void*))dlsym(lib, "_ZN9Backtrace6CreateEiiP12BacktraceMap");
  int (*unwind)(void*, size_t, void*) = (int (*)(void*, size_t, void*))dlsym(lib, "_ZN16BacktraceCurrent6UnwindEmPv");
  check("libbacktrace symbols", create != 0 && unwind != 0);
  if (!create || !unwind) return;
  unsigned long t;
  check("pthread_create for unwind", pthread_create(&t, 0, park_worker, 0) == 0);
  while (!park_worker_tid) usleep(100);
  int stalls = 0, unwound = 0;
  long longest = 0;
  for (int i = 0; i < unwinds; i++) {
    long start = now_ms();
    void* bt = create(getpid(), park_worker_tid, 0);
    if (bt && unwind(bt, 0, 0)) unwound++;
    long took = now_ms() - start;
    /* Itanium C++ ABI: Backtrace's first virtual function is its destructor, so the vtable's
     * second entry is the deleting destructor. */
    if (bt) (*(void (**)(void*))(*(void***)bt + 1))(bt);
    if (took > longest) longest = took;
    if (took > 1000) stalls++;
  }
  park_stop = 1;
  pthread_join(t, 0);
  dprintf(1, "unwind: unwinds=%d unwound=%d stalls=%d longest_ms=%ld\n", unwinds, unwound, stalls, longest);
}

/* "unreachable": what `dumpsys meminfo --unreachable` runs in an app process. The root's real
 * libmemunreachable (LogUnreachableMemory) stops the heap with malloc_disable, walks it with
 * malloc_iterate, scans it from a forked copy of the process, and asks malloc_backtrace for the
 * allocation backtrace of each unreachable block; it logs the result (tag libmemunreachable).
 * Two blocks lose their only pointer in lose_block; one stays reachable from a global. */
static void* volatile reachable_block;

__attribute__((noinline)) static void lose_block(size_t n) {
  char* volatile p = malloc(n);
  memset(p, 0x5a, n);
  p = 0;
}

static void unreachable_test(void) {
  reachable_block = malloc(4321);
  lose_block(3001);
  lose_block(3002);
  void* lib = dlopen("libmemunreachable.so", 2 /* RTLD_NOW */);
  check("dlopen libmemunreachable.so", lib != 0);
  if (!lib) return;
  /* bool LogUnreachableMemory(bool log_contents, size_t limit): extern "C". */
  _Bool (*log_unreachable)(_Bool, size_t) = (_Bool (*)(_Bool, size_t))dlsym(lib, "LogUnreachableMemory");
  check("LogUnreachableMemory found", log_unreachable != 0);
  if (!log_unreachable) return;
  check("LogUnreachableMemory(true, 100)", log_unreachable(1, 100));
}

static void park_test(int rounds) {
  find_libc_text();
  check("libc text found", libc_text_end > libc_text_start);
  signal(33, (sighandler_t)(void*)park_handler);
  unsigned long t;
  check("pthread_create for park", pthread_create(&t, 0, park_worker, 0) == 0);
  while (!park_worker_tid) usleep(100);
  int stalls = 0, parked_rounds = 0;
  long longest = 0;
  for (int r = 0; r < rounds; r++) {
    park_release = 0;
    long wait_start = now_ms();
    while (!parked && now_ms() - wait_start < 1000) {
      int skips = native_skips;
      tgkill(getpid(), park_worker_tid, 33);
      while (!parked && native_skips == skips && now_ms() - wait_start < 1000) usleep(10);
    }
    if (parked) parked_rounds++;
    long start = now_ms();
    void* blocks[64];
    for (int i = 0; i < 64; i++) blocks[i] = malloc(32 + i * 7);
    for (int i = 0; i < 64; i++) blocks[i] = realloc(blocks[i], 200 + i * 13);
    for (int i = 0; i < 64; i++) free(blocks[i]);
    long took = now_ms() - start;
    park_release = 1;
    while (parked) usleep(10);
    if (took > longest) longest = took;
    if (took > 1000) stalls++;
  }
  park_stop = 1;
  pthread_join(t, 0);
  dprintf(1, "park: rounds=%d parked=%d stalls=%d longest_ms=%ld\n", rounds, parked_rounds, stalls, longest);
}

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

/* "small-stack": a thread with a 16 KiB stack (what bionic accepts) overflows a block (an error
 * report with symbolized backtraces), leaves 50 blocks of 16..65 bytes live and calls exit(0) (the
 * exit leak report): both run on the library's own stack (docs/design.md, "Reports run on a stack
 * of their own"); on the thread's they crashed the program. */
static void* small_stack_body(void* arg) {
  (void)arg;
  overflow_here();
  for (size_t i = 0; i < 50; i++) leak_here(16 + i);
  dprintf(1, "small-stack: done\n");
  exit(0);
}

static void small_stack_test(void) {
  /* Room for bionic's pthread_attr_t (56 bytes on LP64) and more. */
  unsigned long attr[16];
  check("pthread_attr_init", pthread_attr_init(attr) == 0);
  check("16 KiB stack", pthread_attr_setstacksize(attr, 16 * 1024) == 0);
  unsigned long t;
  check("pthread_create small stack", pthread_create(&t, attr, small_stack_body, 0) == 0);
  pthread_join(t, 0);
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

// Reached only in fork children (fork-dlopen-report): a double free, so that the child writes
// an error report and symbolizes its backtrace while the loader's lock may be held by a parent
// thread the child does not have.
__attribute__((noinline)) static void child_reports(void) {
  char* volatile p = malloc(100);
  free(p);
  free(p);
}

static int loaders_stop, loader_cycles;

static void* load_and_unload(void* arg) {
  (void)arg;
  while (!__atomic_load_n(&loaders_stop, __ATOMIC_RELAXED)) {
    void* h = dlopen("libz.so", 2 /* RTLD_NOW */);
    if (h != 0) dlclose(h);
    __atomic_add_fetch(&loader_cycles, 1, __ATOMIC_RELAXED);
  }
  return 0;
}

// 300 forks while three threads dlopen and dlclose a library: bionic's loader lock (which
// dl_iterate_phdr takes too) is then held by a thread the child does not have. Each child
// allocates from a call site the parent never used and exits; a child not gone 10 s after the
// last fork is killed and counted. Prints "dlopen forks N hung M". With `report`, each child
// also writes an error report with a backtrace (child_reports).
static void fork_dlopen_test(int report) {
  enum { N = 300, LOADERS = 3 };
  static int pids[N];
  unsigned long t[LOADERS];
  for (int i = 0; i < LOADERS; i++) pthread_create(&t[i], 0, load_and_unload, 0);
  while (__atomic_load_n(&loader_cycles, __ATOMIC_RELAXED) < 10 * LOADERS) usleep(1000);
  int live = 0, status;
  for (int i = 0; i < N; i++) {
    int pid = fork();
    if (pid == 0) {
      child_allocates();
      if (report) child_reports();
      _exit(0);
    }
    pids[i] = pid;
    live += pid > 0;
    for (int done; (done = waitpid(-1, &status, 1 /* WNOHANG */)) > 0; live--)
      for (int k = 0; k <= i; k++)
        if (pids[k] == done) pids[k] = 0;
  }
  __atomic_store_n(&loaders_stop, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < LOADERS; i++) pthread_join(t[i], 0);
  for (int waited = 0; live > 0 && waited < 1000; waited++) {
    int done = waitpid(-1, &status, 1 /* WNOHANG */);
    if (done <= 0) {
      usleep(10000);
      continue;
    }
    for (int k = 0; k < N; k++)
      if (pids[k] == done) pids[k] = 0;
    live--;
  }
  int hung = 0;
  for (int k = 0; k < N; k++) {
    if (pids[k] > 0) {
      hung++;
      kill(pids[k], 9);
      waitpid(pids[k], &status, 0);
    }
  }
  dprintf(1, "dlopen forks %d hung %d\n", N, hung);
}

// 20,000 live blocks (every table grows), then freed, each call made with errno set to a
// sentinel: a call that succeeds must leave it. Prints "errno kept in N calls, clobbered in M".
static void errno_test(void) {
  enum { N = 20000, SENTINEL = 12345 };
  static void* blocks[N];
  int calls = 0, clobbered = 0;
  for (int i = 0; i < N; i++) {
    *__errno() = SENTINEL;
    blocks[i] = (i % 3 == 0) ? calloc(1, (size_t)(16 + i % 500)) : malloc((size_t)(16 + i % 500));
    calls++;
    if (*__errno() != SENTINEL) clobbered++;
    if (i % 2 == 0) {
      *__errno() = SENTINEL;
      blocks[i] = realloc(blocks[i], (size_t)(32 + i % 900));
      calls++;
      if (*__errno() != SENTINEL) clobbered++;
    }
  }
  for (int i = 0; i < N; i++) {
    *__errno() = SENTINEL;
    free(blocks[i]);
    calls++;
    if (*__errno() != SENTINEL) clobbered++;
  }
  dprintf(1, "errno kept in %d calls, clobbered in %d\n", calls - clobbered, clobbered);
}

/* "spares": blocks that leave free_track's queue come back to allocations of their size (the
 * library's spares), holding the old block's 0xef fill and header: each must look exactly like a
 * fresh block. Prints whether any was reused and whether all were zeroed, filled and large
 * enough. */
static int all_bytes(const unsigned char* p, size_t from, size_t to, unsigned char v) {
  for (size_t i = from; i < to; i++)
    if (p[i] != v) return 0;
  return 1;
}

static void spares_test(void) {
  enum { ROUNDS = 64, TAKERS = 16 };
  void* freed[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    unsigned char* p = malloc(100);
    memset(p, 'x', 100);
    freed[i] = p;
    free(p);
  }
  int reused = 0, zero = 1, filled = 1, usable_ok = 1;
  void* taken[2 * TAKERS];
  for (int i = 0; i < TAKERS; i++) {
    unsigned char* c = calloc(1, 100);
    unsigned char* m = malloc(100);
    zero &= all_bytes(c, 0, malloc_usable_size(c), 0);
    filled &= all_bytes(m, 0, 100, 0xeb);
    usable_ok &= malloc_usable_size(c) >= 100 && malloc_usable_size(m) >= 100;
    memset(m, 'y', malloc_usable_size(m));
    for (int j = 0; j < ROUNDS; j++) reused += (freed[j] == c) + (freed[j] == m);
    taken[2 * i] = c;
    taken[2 * i + 1] = m;
  }
  for (int i = 0; i < 2 * TAKERS; i++) free(taken[i]);
  /* Without a header the library resizes blocks itself on bionic (moving them through the
   * spares): contents must survive growing, shrinking a little and shrinking a lot. */
  int realloc_kept = 1;
  unsigned char* r = malloc(100);
  memset(r, 'r', 100);
  r = realloc(r, 3000);
  realloc_kept &= r != 0 && all_bytes(r, 0, 100, 'r');
  memset(r, 's', 3000);
  r = realloc(r, 2000);
  realloc_kept &= r != 0 && all_bytes(r, 0, 2000, 's');
  r = realloc(r, 50);
  realloc_kept &= r != 0 && all_bytes(r, 0, 50, 's') && malloc_usable_size(r) >= 50;
  free(r);
  dprintf(1, "spares: reused %d calloc_zero %d malloc_filled %d usable_ok %d realloc_kept %d\n",
          reused > 0, zero, filled, usable_ok, realloc_kept);
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

  // Through the dispatch table's mallopt slot, which moved in Android 17's table: the native
  // allocator answers 1 (jemalloc and Scudo, Android 9 and later; Android 9's jemalloc answers 0
  // to M_PURGE); a slot of the wrong layout would not.
  check("mallopt(M_DECAY_TIME, 1) reaches the allocator", mallopt(-100 /* M_DECAY_TIME */, 1) == 1);

  if (argc > 1 && strcmp(argv[1], "leak") == 0) {
    void* leaked = malloc(1234);
    check("leaked malloc(1234)", leaked != 0);
  }

  if (argc > 1 && strcmp(argv[1], "bugs") == 0) {
    overflow_here();
    check("leaked malloc(1234)", leak_here(1234) != 0);
  }

  if (argc > 1 && strcmp(argv[1], "fork") == 0) fork_test();
  if (argc > 1 && strcmp(argv[1], "park") == 0) park_test(200);
  if (argc > 1 && strcmp(argv[1], "unwind") == 0) unwind_test(1000);
  if (argc > 1 && strcmp(argv[1], "small-stack") == 0) small_stack_test();
  if (argc > 1 && strcmp(argv[1], "unreachable") == 0) unreachable_test();
  if (argc > 1 && strcmp(argv[1], "spares") == 0) spares_test();
  if (argc > 2 && strcmp(argv[1], "unwind-delayed") == 0) {
    delay_frees = 100;
    int n = 0;
    for (const char* c = argv[2]; *c >= '0' && *c <= '9'; c++) n = n * 10 + (*c - '0');
    unwind_test(n);
  }
  if (argc > 1 && strcmp(argv[1], "fork-dlopen") == 0) fork_dlopen_test(0);
  if (argc > 1 && strcmp(argv[1], "fork-dlopen-report") == 0) fork_dlopen_test(1);
  if (argc > 1 && strcmp(argv[1], "errno") == 0) errno_test();

  if (argc > 2 && strcmp(argv[1], "leaks") == 0) {
    int n = 0;
    for (const char* c = argv[2]; *c >= '0' && *c <= '9'; c++) n = n * 10 + (*c - '0');
    int all_ok = 1;
    for (int i = 1; i <= n; i++) all_ok = all_ok && malloc((size_t)i) != 0;
    check("leaked blocks", all_ok);
    dprintf(1, "malloc_test: %s\n", failures == 0 ? "done" : "FAILED");
    close(0);
    close(1);
    close(2);
    exit(failures == 0 ? 0 : 1);
  }

  if (argc > 1 && strcmp(argv[1], "record") == 0) {
    /* Timestamps against the program's own CLOCK_MONOTONIC: 20 rounds of 25 mallocs of
     * 7000 + i bytes, each between two clock reads, 2 ms apart and after 12 ms (past the
     * library's calibration of the CPU's counter and each anchor's reach), 20 us apart within
     * a round (so that its later calls are timed by the counter far from their anchor, where a
     * wrong rate shows). The reads go to stderr as "clock SIZE BEFORE AFTER" once the last
     * block is allocated. */
    static long long before[500], after[500];
    usleep(12000);
    for (int r = 0; r < 20; r++) {
      usleep(2000);
      for (int k = 0; k < 25; k++) {
        int i = r * 25 + k;
        struct timespec_ t;
        clock_gettime(1 /* CLOCK_MONOTONIC */, &t);
        long long spin_until = t.tv_sec * 1000000000LL + t.tv_nsec + 20000;
        do clock_gettime(1 /* CLOCK_MONOTONIC */, &t);
        while (t.tv_sec * 1000000000LL + t.tv_nsec < spin_until);
        before[i] = t.tv_sec * 1000000000LL + t.tv_nsec;
        if (malloc((size_t)(7000 + i)) == 0) failures++;
        clock_gettime(1 /* CLOCK_MONOTONIC */, &t);
        after[i] = t.tv_sec * 1000000000LL + t.tv_nsec;
      }
    }
    for (int i = 0; i < 500; i++) dprintf(2, "clock %d %lld %lld\n", 7000 + i, before[i], after[i]);
    kill(getpid(), 46);
    dprintf(1, "malloc_test: %s\n", failures == 0 ? "done" : "FAILED");
    _exit(failures == 0 ? 0 : 1);
  }

  dprintf(1, "malloc_test: %s\n", failures == 0 ? "done" : "FAILED");
  exit(failures == 0 ? 0 : 1);
}
