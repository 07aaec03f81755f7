// Plays bionic's part (tests/abi/bionic.h) for the queries and pass-through calls libc makes
// right after installing malloc debug. Usage: queries LIB SCENARIO OPTIONS
//   malloc-info    live blocks of sizes 100 x3, 50 x2, 7 (then, as a zygote child, 7 x2 and 3);
//                  prints debug_malloc_info's output on one line
//   malloc-info-zygote  the same for blocks whose order only the zygote flag decides
//   malloc-info-sizes   sizes on both sides of the size map's largest (65534), and 0
//   app-defaults   the first call after initialize is mallopt(M_DECAY_TIME, 1), as libc makes
//                  it under MALLOC_USE_APP_DEFAULTS; prints what the native mallopt saw
#include "bionic.h"

#define M_DECAY_TIME_VALUE (-100)

static int seen_param, seen_value, seen_calls;
static int recording_mallopt(int param, int value) {
  seen_param = param;
  seen_value = value;
  seen_calls++;
  return 1;
}

/* Allocates `sizes`, then (as a zygote child) `zygote_sizes`, prints malloc_info, frees all. */
static void malloc_info_of(const size_t* sizes, int count, const size_t* zygote_sizes,
                           int zygote_count) {
  void* live[16];
  int n = 0;
  for (int i = 0; i < count; i++) live[n++] = d_malloc(sizes[i]);
  zygote_child = true;
  for (int i = 0; i < zygote_count; i++) live[n++] = d_malloc(zygote_sizes[i]);
  zygote_child = false;
  for (int i = 0; i < n; i++) CHECK(live[i] != NULL);

  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  CHECK(f != NULL);
  errno = 1234;
  CHECK(d_malloc_info(0, f) == 0);
  int errno_after = errno;
  fclose(f);
  printf("%s\n", buf);
  printf("errno=%d\n", errno_after);
  free(buf);
  for (int i = 0; i < n; i++) d_free(live[i]);
}

static void malloc_info_scenario(void) {
  static const size_t sizes[] = {7, 100, 50, 100, 50, 100};
  static const size_t zygote_sizes[] = {3, 7, 7};
  malloc_info_of(sizes, 6, zygote_sizes, 3);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc != 4) return 2;
  load(argv[1]);
  const char* scenario = argv[2];
  if (strcmp(scenario, "malloc-info") == 0) {
    CHECK(init(argv[3]));
    malloc_info_scenario();
  } else if (strcmp(scenario, "malloc-info-zygote") == 0) {
    /* A size in both halves, another size between them in the list: the zygote flag splits
     * the runs. */
    static const size_t sizes[] = {7, 3};
    static const size_t zygote_sizes[] = {7};
    CHECK(init(argv[3]));
    malloc_info_of(sizes, 2, zygote_sizes, 1);
  } else if (strcmp(scenario, "malloc-info-sizes") == 0) {
    static const size_t sizes[] = {65535, 0, 1u << 20, 65534, 65536};
    CHECK(init(argv[3]));
    malloc_info_of(sizes, 5, NULL, 0);
  } else if (strcmp(scenario, "app-defaults") == 0) {
    native.mallopt = recording_mallopt;
    CHECK(init(argv[3]));
    errno = 1234;
    int rc = d_mallopt(M_DECAY_TIME_VALUE, 1);
    printf("mallopt=%d errno=%d native saw %d call(s): (%d, %d)\n", rc, errno, seen_calls,
           seen_param, seen_value);
    void* p = d_malloc(10);
    CHECK(p != NULL);
    d_free(p);
  } else {
    printf("unknown scenario %s\n", scenario);
    return 2;
  }
  return 0;
}
