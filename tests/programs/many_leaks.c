// many_leaks N: leaves N blocks of 1..N bytes live, allocated by leak_here, and exits (the exit
// leak report then logs N leaks; on the host they are written in 64 KiB batches).
#include <stdlib.h>

void* volatile sink;

__attribute__((noinline)) void leak_here(size_t n) {
  sink = malloc(n);
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  for (int i = 1; i <= n; i++) leak_here((size_t)i);
  return 0;
}
