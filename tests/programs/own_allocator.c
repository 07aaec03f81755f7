// A program with an allocator of its own, as with a statically linked jemalloc or mimalloc: it
// defines malloc, free, calloc and realloc only, so a preloaded front's malloc is never the
// process's, while the names it leaves out (reallocarray, free_sized, ...) still bind to the
// front. Its blocks carry a prefix that free and realloc check: a call that reaches them
// through another allocator, or a block of another allocator given to them, aborts.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void __libc_free(void*);
extern void* __libc_realloc(void*, size_t);

#define MAGIC 0x6f776e616c6c6f63ull

struct prefix {
  uint64_t magic;
  uint64_t size;
};

static long calls;

static struct prefix* prefix_of(void* block) {
  struct prefix* p = (struct prefix*)block - 1;
  if (p->magic != MAGIC) {
    static const char msg[] = "own_allocator: a block that is not ours\n";
    write(2, msg, sizeof(msg) - 1);
    abort();
  }
  return p;
}

void* malloc(size_t n) {
  calls++;
  struct prefix* p = __libc_malloc(sizeof(*p) + n);
  if (p == NULL) return NULL;
  p->magic = MAGIC;
  p->size = n;
  return p + 1;
}

void free(void* block) {
  if (block == NULL) return;
  struct prefix* p = prefix_of(block);
  p->magic = 0;
  __libc_free(p);
}

void* calloc(size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  void* block = malloc(n);
  if (block != NULL) memset(block, 0, n);
  return block;
}

void* realloc(void* block, size_t n) {
  if (block == NULL) return malloc(n);
  calls++;
  struct prefix* p = __libc_realloc(prefix_of(block), sizeof(struct prefix) + n);
  if (p == NULL) return NULL;
  p->size = n;
  return p + 1;
}

int main(void) {
  char* p = malloc(10);
  strcpy(p, "hello");
  p = reallocarray(p, 10, 4);  // not defined here: glibc's, or the front's, must use realloc
  if (p == NULL || strcmp(p, "hello") != 0) {
    printf("reallocarray failed\n");
    return 1;
  }
  char* s = strdup("copy");  // glibc's strdup calls the process's malloc
  free(s);
  // C23's free_sized where some library defines it (the front does), else free.
  void (*sized)(void*, size_t) = (void (*)(void*, size_t))dlsym(RTLD_DEFAULT, "free_sized");
  if (sized != NULL) {
    sized(p, 40);
  } else {
    free(p);
  }
  // At least malloc, realloc (from reallocarray) and strdup's malloc reached this allocator.
  if (calls >= 3) {
    printf("ok\n");
  } else {
    printf("only %ld calls\n", calls);
  }
  return 0;
}
