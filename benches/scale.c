// Scale check of the benchmark suite (scripts/bench --workloads scale): N live allocations made
// under `backtrace`, from 64 distinct call paths, then one get_malloc_leak_info and one heap dump
// (write_malloc_leak_info, the v1.2 text) timed. Run under the glibc front.
// Usage: scale N DUMP_FILE [SIZES] (block sizes 16..16+SIZES-1, default 977); prints "live N leak_info_s S entries E dump_s D dump_bytes B".
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

typedef void (*get_info_fn)(uint8_t**, size_t*, size_t*, size_t*, size_t*);
typedef void (*free_info_fn)(uint8_t*);
typedef void (*write_info_fn)(FILE*);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// Distinct call paths: recursion depth d selects one of several return-address chains.
__attribute__((noinline)) static void* alloc_at(int d, size_t size) {
  void* p = d == 0 ? malloc(size) : alloc_at(d - 1, size);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  const char* dump = argc > 2 ? argv[2] : "/tmp/scale-dump.txt";
  long sizes = argc > 3 ? atol(argv[3]) : 977;
  get_info_fn get_info = (get_info_fn)dlsym(RTLD_DEFAULT, "get_malloc_leak_info");
  free_info_fn free_info = (free_info_fn)dlsym(RTLD_DEFAULT, "free_malloc_leak_info");
  write_info_fn write_info = (write_info_fn)dlsym(RTLD_DEFAULT, "write_malloc_leak_info");
  if (!get_info || !free_info || !write_info) return 3;
  void** blocks = malloc(n * sizeof *blocks);
  for (long i = 0; i < n; i++) blocks[i] = alloc_at((int)(i % 64), 16 + (size_t)(i % sizes));
  double t0 = now();
  uint8_t* info;
  size_t overall, info_size, total, frames;
  get_info(&info, &overall, &info_size, &total, &frames);
  double t1 = now();
  free_info(info);
  FILE* f = fopen(dump, "w");
  double t2 = now();
  write_info(f);
  fclose(f);
  double t3 = now();
  struct stat st;
  stat(dump, &st);
  printf("live %ld leak_info_s %.3f entries %zu dump_s %.3f dump_bytes %lld\n", n, t1 - t0,
         info_size ? overall / info_size : 0, t3 - t2, (long long)st.st_size);
  for (long i = 0; i < n; i++) free(blocks[i]);
  free(blocks);
  return 0;
}
