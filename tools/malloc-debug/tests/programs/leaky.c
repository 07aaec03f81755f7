/* A program with known allocation sites for the malloc-debug CLI tests: the biggest site is
 * big_buffers (3 x 4096 bytes through two callers), then small_nodes (10 x 32), then one
 * calloc in main. Nothing is freed, so an exit-time dump shows all of it. */
#include <stdlib.h>
#include <string.h>

static void* volatile sink[64];
static int next_slot;

__attribute__((noinline)) static void keep(void* p) { sink[next_slot++ % 64] = p; }

__attribute__((noinline)) void big_buffers(int n) {
  for (int i = 0; i < n; i++) {
    char* p = malloc(4096);
    memset(p, 1, 4096);
    keep(p);
  }
}

__attribute__((noinline)) void small_nodes(int n) {
  for (int i = 0; i < n; i++) keep(malloc(32));
}

__attribute__((noinline)) void load_assets(void) { big_buffers(2); }

__attribute__((noinline)) void load_config(void) { big_buffers(1); }

int main(int argc, char** argv) {
  load_assets();
  load_config();
  small_nodes(argc > 1 ? atoi(argv[1]) : 10);
  keep(calloc(4, 25));
  return 7;
}
