// 8192 distinct call sites of malloc, for the fork tests (tests/programs/leaky_threads.c and the
// bionic program scripts/android-test-program/malloc_test.c): twice as many return addresses as
// the unwinder's rule cache has slots, so a thread cycling through them (odd stride) keeps
// missing the cache, and each miss walks the loaded modules under the dynamic loader's lock.
// The includer declares malloc. Each case passes a different size, and the function is built
// without optimisation, so that no two call sites are merged.
#ifndef MALLOC_DEBUG_CALL_SITES_H
#define MALLOC_DEBUG_CALL_SITES_H

#define SITE(n) case (n): p = malloc(16 + ((n) & 63)); break;
#define SITES2(n) SITE(n) SITE((n) + 1)
#define SITES4(n) SITES2(n) SITES2((n) + 2)
#define SITES8(n) SITES4(n) SITES4((n) + 4)
#define SITES16(n) SITES8(n) SITES8((n) + 8)
#define SITES32(n) SITES16(n) SITES16((n) + 16)
#define SITES64(n) SITES32(n) SITES32((n) + 32)
#define SITES128(n) SITES64(n) SITES64((n) + 64)
#define SITES256(n) SITES128(n) SITES128((n) + 128)
#define SITES512(n) SITES256(n) SITES256((n) + 256)
#define SITES1024(n) SITES512(n) SITES512((n) + 512)
#define SITES2048(n) SITES1024(n) SITES1024((n) + 1024)
#define SITES4096(n) SITES2048(n) SITES2048((n) + 2048)
#define SITES8192(n) SITES4096(n) SITES4096((n) + 4096)

#define CALL_SITES 8192
#define CALL_SITE_STRIDE 4099

__attribute__((noinline, optimize("O0"))) static void* alloc_at_site(unsigned i) {
  void* p = 0;
  switch (i & (CALL_SITES - 1)) { SITES8192(0) }
  return p;
}

#endif
