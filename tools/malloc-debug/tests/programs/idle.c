/* A long-running native process for the device-dump test: fills a cache (5 x 1000 bytes), says
 * "ready" on stdout, then keeps allocating (so a pending SIGRTMAX-17 dump gets written) until it
 * is killed. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void* volatile cache[5];
static void* volatile scratch;

__attribute__((noinline)) void cache_fill(void) {
  for (int i = 0; i < 5; i++) cache[i] = malloc(1000);
}

int main(void) {
  cache_fill();
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    /* Through a volatile slot, or the compiler drops the pair. */
    scratch = malloc(16);
    free(scratch);
    usleep(10000);
  }
}
