// An allocator in the executable that wraps "the next malloc" (dlsym RTLD_NEXT), as allocation
// counters and tracers compiled into programs do: under a preloaded front the next malloc is the
// front's, which must then act as glibc's. Also frees through names it leaves out.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void* __libc_calloc(size_t, size_t);

static void* (*next_malloc)(size_t);
static void (*next_free)(void*);
static void* (*next_calloc)(size_t, size_t);
static void* (*next_realloc)(void*, size_t);
static long calls;
static int resolving;

static void resolve(void) {
  if (next_malloc != NULL) return;
  resolving = 1;  // dlsym may call calloc: served by glibc meanwhile
  next_calloc = dlsym(RTLD_NEXT, "calloc");
  next_malloc = dlsym(RTLD_NEXT, "malloc");
  next_free = dlsym(RTLD_NEXT, "free");
  next_realloc = dlsym(RTLD_NEXT, "realloc");
  resolving = 0;
}

void* malloc(size_t n) {
  resolve();
  calls++;
  return next_malloc(n);
}

void free(void* p) {
  resolve();
  next_free(p);
}

void* calloc(size_t a, size_t b) {
  if (resolving) return __libc_calloc(a, b);
  resolve();
  calls++;
  return next_calloc(a, b);
}

void* realloc(void* p, size_t n) {
  resolve();
  calls++;
  return next_realloc(p, n);
}

int main(void) {
  char* p = malloc(10);
  strcpy(p, "hello");
  p = reallocarray(p, 10, 4);
  if (p == NULL || strcmp(p, "hello") != 0) {
    printf("reallocarray failed\n");
    return 1;
  }
  void (*sized)(void*, size_t) = (void (*)(void*, size_t))dlsym(RTLD_DEFAULT, "free_sized");
  if (sized != NULL) {
    sized(p, 40);
  } else {
    free(p);
  }
  if (calls >= 2) {
    printf("ok\n");
  } else {
    printf("too few calls\n");
  }
  return 0;
}
