// A program for record_allocs: every recorded call type once on the main thread, then a thread
// that allocates and exits (its thread_done line). With an argument it raises SIGRTMAX-18 and
// allocates, which writes the records so far; the rest are written at exit.
// Usage: record [signal|stats|fork|threads|idle|storm|present|clock] (stats: SIGRTMAX-15 instead; fork: a
// child allocates; present: blocks partly resident, partly unmapped; idle: waits in sigsuspend() for the test's signal; storm: see below) ; prints
// "pid <main thread id>" first.
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/mman.h>
#include <stdint.h>
#include <time.h>
// 20,000 malloc/free pairs: 40,000 recorded calls per thread. The threads mode makes sure the
// signal's write lands in the middle, whatever the scheduler does: each thread counts its
// first pairs in `started`, and before its second half waits for `signalled`.
static int started, signalled;
static void* hammer(void* a) {
  (void)a;
  for (int i = 0; i < 20000; i++) {
    if (i == 100) __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    if (i == 10000)
      while (!__atomic_load_n(&signalled, __ATOMIC_SEQ_CST)) usleep(100);
    free(malloc(16 + (i & 255)));
  }
  return NULL;
}
// storm: every version of a file the library puts in place (it renames a finished temporary
// file over the final name) is also linked as <final name>.v<N>, so the test sees every write,
// not only the last one. The library's renameat and rename calls bind to these definitions
// (the program is linked with -rdynamic).
static int versions, keep_versions;
static void keep_version(int dir, const char* temp, const char* name) {
  if (!keep_versions) return;
  char link[512];
  size_t n = strlen(name);
  if (n > 480) return;
  memcpy(link, name, n);
  memcpy(link + n, ".v", 2);
  // Decimal by hand: snprintf is not async-signal-safe, and this runs in signal handlers.
  char digits[16];
  int v = __atomic_fetch_add(&versions, 1, __ATOMIC_SEQ_CST), d = 0;
  do { digits[d++] = (char)('0' + v % 10); v /= 10; } while (v);
  size_t at = n + 2;
  while (d) link[at++] = digits[--d];
  link[at] = 0;
  linkat(dir, temp, dir, link, 0);
}
int renameat(int olddir, const char* old, int newdir, const char* new) {
  keep_version(olddir, old, new);
  return (int)syscall(SYS_renameat2, olddir, old, newdir, new, 0);
}
int rename(const char* old, const char* new) {
  keep_version(AT_FDCWD, old, new);
  return (int)syscall(SYS_renameat2, AT_FDCWD, old, AT_FDCWD, new, 0);
}

// storm: 20,000 malloc/free pairs with sizes 1..20000, so that each malloc line says which call
// it was; the threads' ids for the signal thread.
static pid_t counted_tids[5];
static void* counted(void* a) {
  __atomic_store_n(&counted_tids[(long)a], (pid_t)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
  for (int i = 1; i <= 20000; i++) free(malloc(i));
  return NULL;
}
// Signals every thread of the process in turn, as fast as it can, until the process exits.
static void* storm(void* a) {
  (void)a;
  pid_t self = (pid_t)syscall(SYS_gettid), pid = getpid();
  for (unsigned i = 0;; i++) {
    pid_t target = i % 6 == 5 ? self : __atomic_load_n(&counted_tids[i % 6], __ATOMIC_SEQ_CST);
    if (target) syscall(SYS_tgkill, pid, target, SIGRTMAX - 18);
    sched_yield();
  }
  return NULL;
}

static void* worker(void* a) { (void)a; for (int i = 0; i < 3; i++) free(malloc(10 + i)); return NULL; }
int main(int argc, char** argv) {
  // The library's handlers run on the alternate signal stack (SA_ONSTACK): give the main thread
  // one of bionic's size (16 KiB), with an inaccessible page below it, so that a handler that
  // needs more stack than a device gives it crashes here. mmap, not malloc: nothing recorded.
  char* alt = mmap(NULL, 4096 + 16384, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  mprotect(alt, 4096, PROT_NONE);
  stack_t ss = {.ss_sp = alt + 4096, .ss_size = 16384, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  printf("pid %d\n", getpid());
  fflush(stdout);
  void* p = malloc(100); free(p);
  void* c = calloc(4, 32); c = realloc(c, 300); c = realloc(c, 0);
  void* r = realloc(NULL, 50); free(r);
  // An aligned block's usable size depends on where glibc's heap put it: printed for the test.
  // stderr is unbuffered, so this allocates nothing.
  void* m = memalign(64, 104); size_t m_usable = malloc_usable_size(m); free(m);
  void* pm; posix_memalign(&pm, 32, 7); size_t pm_usable = malloc_usable_size(pm); free(pm);
  fprintf(stderr, "usable %zu %zu\n", m_usable, pm_usable);
  void* aa = aligned_alloc(16, 32); free(aa);
  free(NULL);
  pthread_t t; pthread_create(&t, NULL, worker, NULL); pthread_join(t, NULL);
  if (argc > 1 && strcmp(argv[1], "threads") == 0) {
    // Four threads allocate while the records are written on a signal: the calls made during
    // the write are in this file or the next, once.
    // The write starts once every thread has made 100 pairs (so the file holds some of theirs)
    // and none has made its last 10,000 (so the exit file does).
    pthread_t h[4];
    for (int i = 0; i < 4; i++) pthread_create(&h[i], NULL, hammer, NULL);
    while (__atomic_load_n(&started, __ATOMIC_SEQ_CST) < 4) usleep(100);
    raise(SIGRTMAX - 18);
    __atomic_store_n(&signalled, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 4; i++) pthread_join(h[i], NULL);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "idle") == 0) {
    // The records so far must be written by the signal's handler while the program waits:
    // nothing allocates after it. The signal is blocked until the wait starts, so that one
    // arriving early is not handled before the wait, which would then never end.
    sigset_t block, none;
    sigemptyset(&block);
    sigaddset(&block, SIGRTMAX - 18);
    sigprocmask(SIG_BLOCK, &block, &none);
    sigdelset(&none, SIGRTMAX - 18);
    write(1, "ready\n", 6);
    sigsuspend(&none);
    _exit(0);
  }
  if (argc > 1 && strcmp(argv[1], "storm") == 0) {
    // Four threads make 40,000 recorded calls each while signals land on every thread, mid-call
    // or not; then the process exits with the signals still coming, so the exit-time write
    // runs beside signal writes.
    keep_versions = 1;
    counted_tids[0] = (pid_t)syscall(SYS_gettid);
    pthread_t h[4], s;
    pthread_create(&s, NULL, storm, NULL);
    for (long i = 0; i < 4; i++) pthread_create(&h[i], NULL, counted, (void*)(i + 1));
    for (int i = 0; i < 4; i++) pthread_join(h[i], NULL);
    for (int i = 1; i < 5; i++) __atomic_store_n(&counted_tids[i], 0, __ATOMIC_SEQ_CST);
    exit(0);
  }
  if (argc > 1 && strcmp(argv[1], "present") == 0) {
    // Present bytes: a 1 MiB block (its own mapping) of which three pages were touched; then a
    // 12 MiB block whose pages from 9 MiB on are unmapped before the free, so that the second
    // mincore call (2048 pages each) fails. Prints the second block's offset in its page.
    char* a = malloc(1 << 20);
    a[0] = a[4096] = a[8192] = 1;
    free(a);
    char* b = malloc(12 << 20);
    memset(b, 1, 12 << 20);
    uintptr_t end = ((uintptr_t)b + malloc_usable_size(b) + 4095) & ~(uintptr_t)4095;
    uintptr_t cut = ((uintptr_t)b + (9 << 20) + 4095) & ~(uintptr_t)4095;
    munmap((void*)cut, end - cut);
    fprintf(stderr, "offset %zu\n", (size_t)((uintptr_t)b & 4095));
    free(b);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "fork") == 0) {
    // The child maps and touches 1 MiB its parent never had: its present bytes must come from
    // its own page table. Its records are written at its exit, to the file named with its pid.
    pid_t child = fork();
    if (child == 0) {
      char* big = malloc(1 << 20);
      memset(big, 1, 1 << 20);
      free(big);
      exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    fprintf(stderr, "child %d\n", (int)child);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "align") == 0) {
    // Alignments below the minimum and not a power of two (memalign accepts both).
    void* a = memalign(1, 24);
    free(a);
    void* b = memalign(48, 24);
    free(b);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "clock") == 0) {
    // Timestamps against the program's own CLOCK_MONOTONIC: 40 rounds of 100 mallocs, each
    // between two clock reads, a 2 ms sleep before each round (past the library's first
    // calibration and each anchor's reach), 5 us apart within a round (so that its later calls
    // are timed by the counter far from their anchor, where a wrong rate shows). Sample i asks
    // 7000 + i bytes, so the test finds its line; the reads are printed after the last sample.
    enum { ROUNDS = 40, PER_ROUND = 100 };
    static struct timespec before[ROUNDS * PER_ROUND], after[ROUNDS * PER_ROUND];
    static void* blocks[ROUNDS * PER_ROUND];
    for (int r = 0; r < ROUNDS; r++) {
      usleep(2000);
      for (int k = 0; k < PER_ROUND; k++) {
        int i = r * PER_ROUND + k;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long long spin_until = t.tv_sec * 1000000000LL + t.tv_nsec + 5000;
        do clock_gettime(CLOCK_MONOTONIC, &t);
        while (t.tv_sec * 1000000000LL + t.tv_nsec < spin_until);
        clock_gettime(CLOCK_MONOTONIC, &before[i]);
        blocks[i] = malloc(7000 + i);
        clock_gettime(CLOCK_MONOTONIC, &after[i]);
      }
    }
    for (int i = 0; i < ROUNDS * PER_ROUND; i++) {
      free(blocks[i]);
      fprintf(stderr, "clock %d %lld %lld\n", 7000 + i,
              before[i].tv_sec * 1000000000LL + before[i].tv_nsec,
              after[i].tv_sec * 1000000000LL + after[i].tv_nsec);
    }
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "stats") == 0) { raise(SIGRTMAX - 15); free(malloc(1)); }
  else if (argc > 1) { raise(SIGRTMAX - 18); free(malloc(1)); }
  return 0;
}
