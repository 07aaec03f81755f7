// Asks for a report from a thread whose stack is as small as glibc and bionic allow (16 KiB):
// the library runs its reports on a stack of its own (src/report_stack.rs); on the thread's
// stack, each of these crashed.
//
//   small_stack exit      the thread leaks 50 blocks and calls exit(0): the exit leak report
//   small_stack write     write_malloc_leak_info(stdout), then return
//   small_stack dump      raise(SIGRTMAX - 17), then malloc+free (the heap dump is written there)
//   small_stack check     raise(SIGRTMAX - 16), then malloc+free (the unreachable check)
//   small_stack overflow  writes one byte past a 20-byte block and frees it (an error report)
//   small_stack double    frees a block twice (an error report)
//
// Prints "done MODE" on stdout when the thread finishes (exit mode: never).
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* mode;
static void* kept[50];
static char* volatile slot;

__attribute__((noinline)) static char* make(size_t n) { return malloc(n); }

__attribute__((noinline)) static void drop(char* p) { free(p); }

__attribute__((noinline)) static void* leak_here(size_t n) {
  void* p = malloc(n);
  memset(p, 1, n);
  return p;
}

static void* body(void* arg) {
  (void)arg;
  for (int i = 0; i < 50; i++) kept[i] = leak_here(16 + (size_t)i);
  if (!strcmp(mode, "exit")) {
    exit(0);
  } else if (!strcmp(mode, "write")) {
    bool (*write_info)(FILE*) = (bool (*)(FILE*))dlsym(RTLD_DEFAULT, "write_malloc_leak_info");
    if (write_info == NULL || !write_info(stdout)) return NULL;
  } else if (!strcmp(mode, "dump")) {
    raise(SIGRTMAX - 17);
    free(malloc(10));
  } else if (!strcmp(mode, "check")) {
    raise(SIGRTMAX - 16);
    free(malloc(10));
  } else if (!strcmp(mode, "overflow")) {
    slot = make(20);
    slot[20] = 1;
    drop(slot);
  } else if (!strcmp(mode, "double")) {
    slot = make(20);
    drop(slot);
    drop(slot);
  } else {
    return NULL;
  }
  printf("done %s\n", mode);
  fflush(stdout);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  mode = argv[1];
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (pthread_attr_setstacksize(&attr, 16 * 1024) != 0) return 3;
  pthread_t t;
  if (pthread_create(&t, &attr, body, NULL) != 0) return 4;
  pthread_join(t, NULL);
  for (int i = 0; i < 50; i++) free(kept[i]);
  return 0;
}
