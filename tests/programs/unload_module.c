/* The module of tests/programs/unload.c: allocates from its own code. */
#include <stdlib.h>

__attribute__((noinline)) void *module_alloc(size_t size) {
  void *p = malloc(size);
  __asm__ volatile("" ::: "memory");
  return p;
}
