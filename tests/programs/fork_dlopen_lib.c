// A library for fork_dlopen.c to load and unload; its constructor allocates like real ones do.
#include <stdlib.h>

static void *block;

__attribute__((constructor)) static void init(void) { block = malloc(32); }
__attribute__((destructor)) static void fini(void) { free(block); }

// An allocation whose caller is code loaded after malloc debug started.
__attribute__((noinline)) void *fork_dlopen_lib_alloc(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}
