// Frees through C23's free_sized / free_aligned_sized and glibc's old cfree, found with dlsym
// as a program built against glibc 2.43 would bind them (this machine's glibc may predate
// them, and its headers then do not declare them). Under the front each must reach the
// library's free.
//
//   sized_free clean     frees one block by each function, leaks one block, prints its address
//   sized_free overflow  writes one byte past a 12-byte block, then free_sized()s it
//   sized_free double    free_aligned_sized()s the same block twice
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*free_sized_fn)(void*, size_t);
typedef void (*free_aligned_sized_fn)(void*, size_t, size_t);
typedef void (*cfree_fn)(void*);

static void* must_find(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  if (f == NULL) {
    printf("missing %s\n", name);
    exit(2);
  }
  return f;
}

static free_sized_fn fs;
static free_aligned_sized_fn fas;
static cfree_fn cf;

__attribute__((noinline)) static void overflow(void) {
  char* p = malloc(12);
  memset(p, 1, 13);  // one byte too many
  fs(p, 12);
}

__attribute__((noinline)) static void double_free(void) {
  void* p = aligned_alloc(64, 128);
  fas(p, 64, 128);
  fas(p, 64, 128);
}

int main(int argc, char** argv) {
  fs = (free_sized_fn)must_find("free_sized");
  fas = (free_aligned_sized_fn)must_find("free_aligned_sized");
  cf = (cfree_fn)must_find("cfree");
  const char* mode = argc > 1 ? argv[1] : "clean";
  if (strcmp(mode, "overflow") == 0) {
    overflow();
  } else if (strcmp(mode, "double") == 0) {
    double_free();
  } else {
    fs(malloc(24), 24);
    fas(aligned_alloc(64, 128), 64, 128);
    cf(calloc(3, 8));
    fs(NULL, 0);
    void* leaked = malloc(40);
    printf("leaked=%p\n", leaked);
  }
  printf("done\n");
  return 0;
}
