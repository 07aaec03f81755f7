// Prints the C contract's layout of both MallocDispatch tables and the leak-info types, one "name value"
// per line, for comparison with the Rust definitions.
#include <stddef.h>
#include <stdio.h>

#include "malloc_debug.h"

#define FIELD(f) printf("offset.%s %zu\n", #f, offsetof(MallocDispatch, f));

int main(void) {
  FIELD(calloc) FIELD(free) FIELD(mallinfo) FIELD(malloc) FIELD(malloc_usable_size)
  FIELD(memalign) FIELD(posix_memalign)
#if !defined(__LP64__)
  FIELD(pvalloc) FIELD(valloc)
#endif
  FIELD(realloc) FIELD(malloc_iterate) FIELD(malloc_disable) FIELD(malloc_enable)
  FIELD(mallopt) FIELD(aligned_alloc) FIELD(malloc_info)
#define FIELD17(f) printf("offset17.%s %zu\n", #f, offsetof(MallocDispatch17, f));
  FIELD17(calloc) FIELD17(free) FIELD17(mallinfo) FIELD17(malloc) FIELD17(malloc_usable_size)
  FIELD17(memalign) FIELD17(posix_memalign)
#if !defined(__LP64__)
  FIELD17(pvalloc) FIELD17(valloc)
#endif
  FIELD17(realloc) FIELD17(reallocarray) FIELD17(malloc_iterate) FIELD17(malloc_disable)
  FIELD17(malloc_enable) FIELD17(mallopt) FIELD17(aligned_alloc) FIELD17(malloc_info)
  printf("sizeof17 %zu\n", sizeof(MallocDispatch17));
  printf("alignof17 %zu\n", _Alignof(MallocDispatch17));
  printf("sizeof %zu\n", sizeof(MallocDispatch));
  printf("alignof %zu\n", _Alignof(MallocDispatch));
  printf("mallinfo.sizeof %zu\n", sizeof(struct mallinfo));
  return 0;
}
