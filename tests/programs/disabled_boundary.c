/* Issue 20.1: a block is freed by the allocator that made it, whichever side of the "debug calls
 * disabled" boundary the thread is on. The thread that calls malloc_disable is marked until
 * malloc_enable (its calls go straight to the native allocator), exactly as a thread inside the
 * library is while it runs foreign code (dlerror strings, symbolization).
 *
 * Blocks made before the boundary are freed (and resized, and measured) beyond it, both ways.
 * Prints "done" after the last free.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The front's (Android's libc has them too); looked up so that the program links anywhere. */
static void (*malloc_disable)(void);
static void (*malloc_enable)(void);

#define N 8

int main(void) {
  malloc_disable = (void (*)(void))dlsym(RTLD_DEFAULT, "malloc_disable");
  malloc_enable = (void (*)(void))dlsym(RTLD_DEFAULT, "malloc_enable");
  if (!malloc_disable || !malloc_enable) {
    printf("no malloc_disable\n");
    return 2;
  }
  void *debug[N], *debug2[N], *native[N], *native2[N];
  for (int i = 0; i < N; i++) {
    debug[i] = malloc(40 + i);
    debug2[i] = malloc(40 + i);
    memset(debug[i], 'd', 40 + i);
    memset(debug2[i], 'd', 40 + i);
  }
  malloc_disable();
  for (int i = 0; i < N; i++) {
    native[i] = malloc(24 + i);
    native2[i] = calloc(1, 24 + i);
    memset(native[i], 'n', 24 + i);
  }
  /* Debug blocks, while marked. */
  size_t usable = 0;
  for (int i = 0; i < N; i++) {
    usable += malloc_usable_size(debug2[i]) >= (size_t)(40 + i);
    free(debug[i]);
    debug2[i] = realloc(debug2[i], 4000);
    if (!debug2[i] || memcmp(debug2[i], "dddddddddddddddddddddddddddddddddddddddd", 40) != 0) {
      printf("bad realloc while disabled\n");
      return 1;
    }
  }
  malloc_enable();
  /* Native blocks (and those debug2 became), once unmarked. */
  for (int i = 0; i < N; i++) {
    usable += malloc_usable_size(native[i]) >= (size_t)(24 + i);
    free(native[i]);
    native2[i] = realloc(native2[i], 3000);
    if (!native2[i]) {
      printf("bad realloc after enable\n");
      return 1;
    }
    free(native2[i]);
    free(debug2[i]);
  }
  printf("usable %zu of %d\n", usable, 2 * N);
  printf("done\n");
  return 0;
}
