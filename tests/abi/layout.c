// Prints the C contract's layout of MallocDispatch and the leak-info types, one "name value"
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
  printf("sizeof %zu\n", sizeof(MallocDispatch));
  printf("alignof %zu\n", _Alignof(MallocDispatch));
  printf("mallinfo.sizeof %zu\n", sizeof(struct mallinfo));
  return 0;
}
