// Exit leak report at scale (scripts/bench --workloads exitleaks): N blocks made from 64 distinct
// call paths and left live, so `leak_track` reports every one at exit. Prints the monotonic time
// at which main returns ("exit_at S"): the benchmark takes the rest of the wall time as the
// report's. Usage: exit_leaks N.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) static void* alloc_at(int d, size_t size) {
  void* p = d == 0 ? malloc(size) : alloc_at(d - 1, size);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  for (long i = 0; i < n; i++) {
    void* p = alloc_at((int)(i % 64), 16 + (size_t)(i % 97));
    __asm__ volatile("" : : "r"(p) : "memory");
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  printf("exit_at %.6f\n", ts.tv_sec + ts.tv_nsec / 1e9);
  fflush(stdout);
  return 0;
}
