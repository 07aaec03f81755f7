// A program for record_allocs: every recorded call type once on the main thread, then a thread
// that allocates and exits (its thread_done line). With an argument it raises SIGRTMAX-18 and
// allocates, which writes the records so far; the rest are written at exit.
// Usage: record [signal|stats|fork|threads] (stats: SIGRTMAX-15 instead; fork: a child allocates) ; prints "pid <main thread id>" first.
#define _GNU_SOURCE
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>
// 20,000 malloc/free pairs: 40,000 recorded calls per thread.
static void* hammer(void* a) {
  (void)a;
  for (int i = 0; i < 20000; i++) free(malloc(16 + (i & 255)));
  return NULL;
}
static void* worker(void* a) { (void)a; for (int i = 0; i < 3; i++) free(malloc(10 + i)); return NULL; }
int main(int argc, char** argv) {
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
    // the write wait for it and are recorded after it (spec §11.6).
    pthread_t h[4];
    for (int i = 0; i < 4; i++) pthread_create(&h[i], NULL, hammer, NULL);
    usleep(5000);
    raise(SIGRTMAX - 18);
    for (int i = 0; i < 4; i++) pthread_join(h[i], NULL);
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
  if (argc > 1 && strcmp(argv[1], "stats") == 0) { raise(SIGRTMAX - 15); free(malloc(1)); }
  else if (argc > 1) { raise(SIGRTMAX - 18); free(malloc(1)); }
  return 0;
}
