// A program for backtrace tests under the glibc front. Modes:
//   leak   leaks from two distinct call sites (3 x 4096 from leak_big, 5 x 48 from leak_small),
//          prints the front's get_malloc_leak_info totals ("info TOTAL ENTRIES INFO_SIZE"),
//          then exits (the exit dump is written then).
//   signal starts 4 allocating threads, raises SIGRTMAX-17, keeps allocating until the dump file
//          <argv[2]>.<pid>.txt exists, then stops.
//   fork   one thread allocates in a loop, from more call sites than the unwinder caches, while
//          the main thread forks 1000 times; each child allocates from a new call site and
//          exits. Prints "forks 1000" when all children were reaped.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

// Bionic's leak API, exported by the glibc front (looked up at run time: nothing to link).
typedef void (*get_info_fn)(uint8_t**, size_t*, size_t*, size_t*, size_t*);
typedef void (*free_info_fn)(uint8_t*);

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void* leak_big(void) {
  void* p = malloc(4096);
  KEEP(p);
  return p;
}

__attribute__((noinline)) void* leak_small(void) {
  void* p = malloc(48);
  KEEP(p);
  return p;
}

static atomic_int stop;

static void* churn(void* arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    void* p = malloc(64 + (rand() & 255));
    KEEP(p);
    free(p);
  }
  return NULL;
}

#include "call_sites.h"

static void* churn_sites(void* arg) {
  (void)arg;
  for (unsigned i = 0; !atomic_load(&stop); i += CALL_SITE_STRIDE) {  // odd stride: every site in turn
    void* p = alloc_at_site(i);
    KEEP(p);
    free(p);
  }
  return NULL;
}

// Reached only in fork children: a return address the parent never unwound through, so the
// child's first allocation misses the inherited rule cache and needs the loader's lock.
__attribute__((noinline)) static void child_allocates(void) {
  void* p = malloc(100);
  KEEP(p);
  free(p);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "leak";
  if (strcmp(mode, "leak") == 0) {
    for (int i = 0; i < 3; i++) leak_big();
    for (int i = 0; i < 5; i++) leak_small();
    get_info_fn get_info = (get_info_fn)dlsym(RTLD_DEFAULT, "get_malloc_leak_info");
    free_info_fn free_info = (free_info_fn)dlsym(RTLD_DEFAULT, "free_malloc_leak_info");
    if (!get_info || !free_info) return 3;
    uint8_t* info;
    size_t overall, info_size, total, frames;
    get_info(&info, &overall, &info_size, &total, &frames);
    printf("info %zu %zu %zu %zu\n", total, info_size ? overall / info_size : 0, info_size, frames);
    free_info(info);
    return 0;
  }
  if (strcmp(mode, "signal") == 0 && argc > 2) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%d.txt", argv[2], getpid());
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, NULL);
    leak_big();
    raise(SIGRTMAX - 17);
    struct stat st;
    for (int i = 0; i < 2000 && stat(path, &st) != 0; i++) {
      free(malloc(16));
      usleep(5000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("dump %s\n", stat(path, &st) == 0 ? "found" : "missing");
    return 0;
  }
  if (strcmp(mode, "fork") == 0) {
    pthread_t t;
    pthread_create(&t, NULL, churn_sites, NULL);
    int reaped = 0;
    for (int i = 0; i < 1000; i++) {
      pid_t pid = fork();
      if (pid == 0) {
        child_allocates();
        _exit(0);
      }
      int status;
      if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0)
        reaped++;
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    printf("forks %d\n", reaped);
    return 0;
  }
  return 2;
}
