// Leak info and backtrace controls through the C ABI, the way bionic drives the library.
// Usage: driver LIB SCENARIO OPTIONS [PATH] ; prints one line per leak-info entry:
//   "entry SIZE_HEX NUM FRAMES" then "total T info_size I overall O frames F".
#include "../abi/bionic.h"
#include <signal.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) static void* site_a(size_t n) { void* p = d_malloc(n); KEEP(p); return p; }
__attribute__((noinline)) static void* site_b(size_t n) { void* p = d_malloc(n); KEEP(p); return p; }
__attribute__((noinline)) static void* site_c(size_t n) { void* p = d_malloc(n); KEEP(p); return p; }

static void print_leak_info(void) {
  uint8_t* info = (uint8_t*)1;
  size_t overall = 1, info_size = 1, total = 1, frames = 1;
  d_get_malloc_leak_info(&info, &overall, &info_size, &total, &frames);
  for (size_t off = 0; info_size && off < overall; off += info_size) {
    size_t size, num;
    memcpy(&size, info + off, sizeof size);
    memcpy(&num, info + off + sizeof(size_t), sizeof num);
    int n = 0;
    for (size_t f = 0; f < frames; f++) {
      uintptr_t pc;
      memcpy(&pc, info + off + 2 * sizeof(size_t) + f * sizeof pc, sizeof pc);
      if (pc == 0) break;
      n++;
    }
    printf("entry %zx %zu %d\n", size, num, n);
  }
  printf("total %zu info_size %zu overall %zu frames %zu null %d\n", total, info_size, overall,
         frames, info == NULL);
  d_free_malloc_leak_info(info);
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  load(argv[1]);
  const char* scenario = argv[2];
  if (!init(argv[3])) return 1;
  if (strcmp(scenario, "sites") == 0) {
    // 3 x 100 from one call site, 2 x 200 from another, 1 x 50 in a "zygote child".
    for (int i = 0; i < 3; i++) site_a(100);
    for (int i = 0; i < 2; i++) site_b(200);
    zygote_child = true;
    site_c(50);
    zygote_child = false;
    print_leak_info();
  } else if (strcmp(scenario, "sizes") == 0) {
    // The backtrace size filters: sizes 10, 100, 1000 from one site each.
    site_a(10);
    site_b(100);
    site_c(1000);
    print_leak_info();
  } else if (strcmp(scenario, "toggle") == 0) {
    // backtrace_enable_on_signal: off until the signal, on after it, off after the second.
    site_a(11);
    raise(SIGRTMAX - 19);
    site_b(22);
    raise(SIGRTMAX - 19);
    site_c(33);
    print_leak_info();
  } else if (strcmp(scenario, "dump") == 0 && argc > 4) {
    // debug_dump_heap(path): two blocks from one site, one from another.
    for (int i = 0; i < 2; i++) site_a(100);
    site_b(300);
    d_dump_heap(argv[4]);
    printf("dumped\n");
  } else if (strcmp(scenario, "write_leak_info") == 0) {
    // debug_write_malloc_leak_info(FILE*): the same text through a stream.
    site_a(100);
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    d_write_malloc_leak_info(f);
    fclose(f);
    fputs(text, stdout);
    free(text);
  } else if (strcmp(scenario, "empty") == 0) {
    print_leak_info();
  } else if (strcmp(scenario, "malloc_backtrace") == 0) {
    void* p = site_a(64);
    uintptr_t frames[32];
    size_t n = d_malloc_backtrace(p, frames, 32);
    int here = 0;
    for (size_t i = 0; i < n; i++) {
      Dl_info dl;
      if (dladdr((void*)frames[i], &dl) && dl.dli_sname && strcmp(dl.dli_sname, "main") == 0) here = 1;
    }
    char local;
    printf("frames %zu main %d unknown %zu\n", n, here, d_malloc_backtrace(&local, frames, 32));
  } else {
    printf("unknown scenario %s\n", scenario);
    return 2;
  }
  return 0;
}
