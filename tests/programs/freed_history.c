// A write after free that free_track finds at exit, after unused backtrace records were
// collected while the freed block waited in the queue (for the error_backtraces extension: the
// block's allocation backtrace must survive the collection). Prints "done".
#include <stdio.h>
#include <stdlib.h>

#include "call_sites.h"

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) char* victim_alloc(void) {
  char* p = malloc(24);
  KEEP(p);
  return p;
}

__attribute__((noinline)) void victim_free(char* p) {
  free(p);
  KEEP(p);
}

int main(void) {
  char* victim = victim_alloc();
  victim_free(victim);
  victim[5] = 'w';  // written after free
  KEEP(victim);
  // A new call path per allocation, each freed at once: more unused records than a collection
  // waits for (4096), so at least one collection runs while the victim is queued.
  for (unsigned i = 0; i < CALL_SITES; i++) free(alloc_at_site(i));
  printf("done\n");
  return 0;
}
