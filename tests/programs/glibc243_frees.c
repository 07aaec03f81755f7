// Stands in for glibc 2.43 on an older glibc: its C23 free_sized and free_aligned_sized, and
// the old cfree, freeing with glibc's allocator directly, as glibc's own do, never through an
// interposed free(). Preloaded after the front, it is what a program binds to when the front
// does not define these names itself.
#include <stddef.h>

extern void __libc_free(void*);

void free_sized(void* pointer, size_t size) {
  (void)size;
  __libc_free(pointer);
}

void free_aligned_sized(void* pointer, size_t alignment, size_t size) {
  (void)alignment;
  (void)size;
  __libc_free(pointer);
}

void cfree(void* pointer) { __libc_free(pointer); }
