// A program for the unreachable-memory check: one block loses its last reference (and holds the
// only reference to a second one), while others stay reachable through a global, another
// thread's stack, and a chain of heap blocks hanging off a global. It then raises SIGRTMAX-16
// and allocates, which runs the check; the test reads the log.
// Usage: unreachable [signal]   (signal: send the check signal; default on)
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node {
  struct node* next;
  char tag[24];
};

void* volatile global_block;      // reachable through .bss
struct node* volatile chain_head; // global -> A -> B -> C

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int ready, done;

static void* holder(void* arg) {
  (void)arg;
  // Only this thread's stack refers to this block.
  char* volatile on_stack = malloc(48);
  strcpy(on_stack, "held by a thread stack");
  pthread_mutex_lock(&lock);
  ready = 1;
  pthread_cond_broadcast(&cond);
  while (!done) pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);
  free(on_stack);
  return NULL;
}

__attribute__((noinline)) static void make_chain(void) {
  struct node* c = calloc(1, sizeof *c);
  struct node* b = calloc(1, sizeof *b);
  struct node* a = calloc(1, sizeof *a);
  strcpy(a->tag, "chain A");
  strcpy(b->tag, "chain B");
  strcpy(c->tag, "chain C");
  a->next = b;
  b->next = c;
  chain_head = a;
}

// Makes the compiler assume `p`'s memory is read, so stores to a block that never escapes are
// kept.
#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

// The leak: a 40-byte block pointing at a 100-byte one, both dropped, with recognisable contents.
__attribute__((noinline)) static void leak(void) {
  char* inner = malloc(100);
  memset(inner, 'x', 100);
  char* outer = malloc(40);
  memset(outer, 0, 40);
  strcpy(outer + 8, "unreachable!");
  memcpy(outer, &inner, sizeof inner);
  KEEP(inner);
  KEEP(outer);
}

__attribute__((noinline)) static void scrub_stack(void) {
  volatile char junk[4096];
  memset((char*)junk, 0, sizeof junk);
}

int main(int argc, char** argv) {
  global_block = malloc(64);
  strcpy(global_block, "held by a global");
  make_chain();
  pthread_t t;
  pthread_create(&t, NULL, holder, NULL);
  pthread_mutex_lock(&lock);
  while (!ready) pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);

  leak();
  scrub_stack();
  if (argc < 2 || strcmp(argv[1], "nosignal") != 0) {
    raise(SIGRTMAX - 16);
    free(malloc(1));  // the check runs here
  }
  printf("checked\n");

  pthread_mutex_lock(&lock);
  done = 1;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&lock);
  pthread_join(t, NULL);
  return 0;
}
