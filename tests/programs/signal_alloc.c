// A signal handler that allocates, landing on a thread that is inside malloc debug: a profiling
// timer interrupts the main thread while it allocates, reallocates and frees (with enough live
// blocks that the live table grows and backtrace records are made and collected), and when the
// interrupted pc is in libc_malloc_debug.so the handler itself mallocs and frees. (Only there:
// interrupted inside the native allocator, which is not reentrant, a handler's malloc would
// break it with or without the library.) A library that holds a lock where the signal can land
// deadlocks the thread on itself. Prints "signal_alloc ok" when the handler allocated inside
// the library at least 300 times.
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>

static volatile sig_atomic_t inside;
static unsigned long lib_start, lib_end;

static void handler(int sig, siginfo_t* info, void* context) {
  (void)sig;
  (void)info;
  unsigned long pc = (unsigned long)((ucontext_t*)context)->uc_mcontext.gregs[REG_RIP];
  if (pc < lib_start || pc >= lib_end) return;
  void* p = malloc(24 + (inside % 512));
  if (p) memset(p, 1, 24);
  free(p);
  inside++;
}

static void find_library(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps && fgets(line, sizeof line, maps)) {
    unsigned long start, end;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && perms[2] == 'x' &&
        strstr(line, "libc_malloc_debug.so")) {
      lib_start = start;
      lib_end = end;
    }
  }
  if (maps) fclose(maps);
}

// Distinct call paths, so that backtrace records keep being made.
__attribute__((noinline)) static void* path(int depth, size_t size) {
  if (depth == 0) return malloc(size);
  void* p = path(depth - 1, size);
  __asm__ volatile("" ::: "memory");
  return p;
}

int main(void) {
  find_library();
  if (lib_end == 0) {
    printf("signal_alloc: libc_malloc_debug.so is not loaded\n");
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGPROF, &sa, NULL);
  struct itimerval it = {{0, 50}, {0, 50}};
  setitimer(ITIMER_PROF, &it, NULL);
  enum { LIVE = 50000 };
  static void* live[LIVE];
  unsigned x = 12345;
  // Until the handler has allocated inside the library often (timer ticks are coarse), at most
  // 60M calls.
  for (long i = 0; (i < 1000000 || inside < 300) && i < 60000000; i++) {
    x = x * 1103515245u + 12345u;
    unsigned slot = (x >> 8) % LIVE;
    size_t size = 1 + (x >> 20) % 700;
    if (live[slot]) {
      if (x & 1) {
        free(live[slot]);
        live[slot] = NULL;
      } else {
        void* q = realloc(live[slot], size);
        if (q) live[slot] = q;
      }
    } else {
      live[slot] = path((int)(x >> 28), size);
    }
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, NULL);
  for (unsigned i = 0; i < LIVE; i++) free(live[i]);
  printf("signal_alloc %s\n", inside >= 300 ? "ok" : "saw too few signals inside the library");
  return 0;
}
