// One heap bug per mode, each in its own function so the reports' backtraces can name it.
// Prints "done" at the end: the bugs are reported, and the program goes on (unless
// abort_on_error). Usage: bugs MODE   (off-by-one underflow use-after-free double-free
// wild-free leak)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

// A malloc and free the compiler cannot elide (a plain free(malloc(n)) is removed at -O1).
static void churn(int times) {
  for (int j = 0; j < times; j++) {
    void* p = malloc(20);
    KEEP(p);
    free(p);
  }
}

__attribute__((noinline)) void off_by_one(void) {
  char* p = malloc(10);
  KEEP(p);
  memset(p + 9, 'a', 2);  // one byte past the end
  KEEP(p);
  free(p);
}

__attribute__((noinline)) void underflow(void) {
  char* p = malloc(10);
  KEEP(p);
  p[-1] = 'u';  // the byte before the block
  KEEP(p);
  free(p);
}

__attribute__((noinline)) void use_after_free(void) {
  char* p = malloc(20);
  KEEP(p);
  free(p);
  p[4] = 'w';  // written after free
  KEEP(p);
}

// The damaged block is freed by a thread that frees four more and exits: free_track holds
// blocks per thread, and another thread's frees must still push it out (and get it checked)
// before exit.
static void* use_after_free_then_exit(void* unused) {
  use_after_free();
  churn(4);
  return unused;
}

__attribute__((noinline)) void use_after_free_in_thread(void) {
  pthread_t t;
  pthread_create(&t, NULL, use_after_free_then_exit, NULL);
  pthread_join(t, NULL);
  fprintf(stderr, "thread joined\n");
  churn(200);
  fprintf(stderr, "pushed out\n");
}

__attribute__((noinline)) void double_free(void) {
  char* p = malloc(30);
  KEEP(p);
  free(p);
  free(p);
}

__attribute__((noinline)) void wild_free(void) {
  char on_stack[16];
  char* volatile wild = on_stack + 8;
  free(wild);
}

__attribute__((noinline)) void interior_free(void) {
  char* p = malloc(32);
  KEEP(p);
  free(p + 8);  // a pointer into the block, not its start
  free(p);
}

__attribute__((noinline)) void leak(void) {
  char* p = malloc(40);
  KEEP(p);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  static const struct {
    const char* name;
    void (*run)(void);
  } modes[] = {{"off-by-one", off_by_one}, {"underflow", underflow},
               {"use-after-free", use_after_free}, {"double-free", double_free},
               {"wild-free", wild_free}, {"leak", leak},
               {"use-after-free-in-thread", use_after_free_in_thread},
               {"interior-free", interior_free}};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    if (strcmp(mode, modes[i].name) == 0) {
      modes[i].run();
      // free_track checks its queue when blocks leave it: push the freed block out.
      churn(200);
      printf("done\n");
      return 0;
    }
  }
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
