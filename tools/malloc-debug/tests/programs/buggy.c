/* One classic heap bug per mode, for `malloc-debug run`'s default options: argv[1] is
 * overflow, use-after-free, double-free or leak. Exits 0. */
#include <stdlib.h>
#include <string.h>

static char* volatile slot;

__attribute__((noinline)) char* make(size_t n) { return malloc(n); }

__attribute__((noinline)) void drop(char* p) { free(p); }

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  slot = make(20);
  if (strcmp(mode, "overflow") == 0) {
    slot[20] = 1;
    drop(slot);
  } else if (strcmp(mode, "use-after-free") == 0) {
    drop(slot);
    slot[3] = 1;
    /* free_track checks the freed block when it leaves the queue, at exit at the latest. */
  } else if (strcmp(mode, "double-free") == 0) {
    drop(slot);
    drop(slot);
  } else if (strcmp(mode, "leak") == 0) {
    /* The only pointer to the block is dropped: definitely lost, not merely still reachable. */
    slot = 0;
  } else {
    drop(slot);
  }
  return 0;
}
