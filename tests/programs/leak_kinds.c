// A program whose heap at exit is known block by block, for the exit-time leak classification
// (leak_unreachable). Every block has its own size so that the test can tell them apart.
// Usage: leak_kinds simple | graph | io FILE | overflow | clean [STATUS] | reaper
//   simple: 2 blocks reachable from globals (16, 24 bytes), 3 dropped ones (100, 200, 300).
//   graph:  reachable: a global points 8 bytes into A (48), A -> B (56);
//           lost chain C (64) -> D (72) -> E (80): C definitely, D and E indirectly lost;
//           lost cycle F (88) <-> G (96): the lower-addressed one definitely lost, the other
//           indirectly; H (104) points 40 bytes into I (112): H definitely, I indirectly lost.
//   io:     writes to stdout and stderr, closes every descriptor above 2, opens FILE (which gets
//           the lowest free number) and writes to it, then leaks as `simple` does.
//   overflow: a one-byte heap overflow (freed: the guard check reports it), nothing leaked.
//   clean:  nothing leaked; exits with STATUS (default 0).
//   reaper: as `simple`, while another thread reaps every child of the process as soon as it
//           exits (as a shell's SIGCHLD handling does), the scan's child included.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void* volatile keep1;
void* volatile keep2;

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) static void drop(size_t size) {
  char* p = malloc(size);
  memset(p, 0x5a, size);
  KEEP(p);
}

// Runs `f` 2 KiB below the caller's frame: the dead frames it leaves (which may hold copies of
// the pointers it dropped) are then well inside what scrub_stack overwrites, away from the
// padding slots of scrub_stack's own frame, which its memset does not reach.
__attribute__((noinline)) static void deep(void (*f)(size_t), size_t arg) {
  volatile char pad[2048];
  pad[0] = 0;
  f(arg);
  KEEP(pad);
}

__attribute__((noinline)) static void graph(size_t unused) {
  (void)unused;
  char* a = malloc(48);
  char* b = malloc(56);
  memset(a, 0, 48);
  memcpy(a, &b, sizeof b);
  keep1 = a + 8;

  char* c = calloc(1, 64);
  char* d = calloc(1, 72);
  char* e = calloc(1, 80);
  memcpy(c, &d, sizeof d);
  memcpy(d + 16, &e, sizeof e);

  char* f = calloc(1, 88);
  char* g = calloc(1, 96);
  memcpy(f, &g, sizeof g);
  memcpy(g + 8, &f, sizeof f);

  char* h = calloc(1, 104);
  char* i = calloc(1, 112);
  char* inside = i + 40;
  memcpy(h + 24, &inside, sizeof inside);
  KEEP(c);
  KEEP(h);
}

// Overwrites the dead frames the functions above left below main's, so no stale copy of a
// dropped pointer survives on the stack.
__attribute__((noinline)) static void scrub_stack(void) {
  volatile char junk[8192];
  memset((char*)junk, 0, sizeof junk);
}

static void* reap(void* arg) {
  (void)arg;
  for (;;) {
    if (waitpid(-1, NULL, 0) < 0 && errno == ECHILD) {
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "simple";
  if (strcmp(mode, "clean") == 0) {
    return argc > 2 ? atoi(argv[2]) : 0;
  }
  if (strcmp(mode, "overflow") == 0) {
    char* p = malloc(10);
    KEEP(p);
    // p[10], written through an index the compiler cannot see (strlen("overflow") + 2).
    ((volatile char*)p)[strlen(mode) + 2] = 0;
    free(p);
    return 0;
  }
  if (strcmp(mode, "io") == 0 && argc > 2) {
    printf("to stdout\n");
    fflush(stdout);
    fprintf(stderr, "to stderr\n");
    for (int fd = 3; fd < 1024; fd++) close(fd);
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "mine\n", 5) != 5) return 3;
    // The descriptor stays open: the log must not end up in it.
  }
  if (strcmp(mode, "reaper") == 0) {
    pthread_t t;
    pthread_create(&t, NULL, reap, NULL);
    pthread_detach(t);
  }
  if (strcmp(mode, "graph") == 0) {
    deep(graph, 0);
  } else {
    keep1 = malloc(16);
    keep2 = malloc(24);
    deep(drop, 100);
    deep(drop, 200);
    deep(drop, 300);
  }
  scrub_stack();
  return 0;
}
