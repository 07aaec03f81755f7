// A library for fork_dlopen.c to load and unload; its constructor allocates like real ones do.
#include <stdlib.h>

static void *block;

__attribute__((constructor)) static void init(void) { block = malloc(32); }
__attribute__((destructor)) static void fini(void) { free(block); }

int fork_dlopen_lib_value(void) { return block != NULL; }
