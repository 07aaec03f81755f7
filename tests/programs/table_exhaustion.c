/* Issue 20.7: the live table cannot grow, yet every block is freed correctly and none is
 * reported. Deterministic: the program sets aside heap memory (a freed region the heap keeps),
 * then limits its address space to what it has mapped, so that every new mapping fails (the
 * table's growth among them) while malloc still succeeds from the kept region. Each round
 * allocates, reallocs and frees BLOCKS blocks; ROUNDS rounds need more than the kept region,
 * so a block that was not really freed makes a later malloc fail.
 *
 * Usage: table_exhaustion BLOCKS ROUNDS [double-free]. Prints "round N ok" per round and
 * "done"; with "double-free", then frees one block twice (a real error, to be reported with its
 * backtrace while mappings still fail).
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define RESERVE_CHUNKS 4
#define RESERVE_CHUNK (16u << 20)

static unsigned long mapped_bytes(void) {
  unsigned long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%lu", &pages) != 1) {
    perror("statm");
    exit(2);
  }
  fclose(f);
  return pages * (unsigned long)sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) return 2;
  int blocks = atoi(argv[1]), rounds = atoi(argv[2]);
  void **p = calloc((size_t)blocks, sizeof(void *));
  /* Every shard of the live table gets its first table while mappings still succeed. */
  for (int i = 0; i < blocks && i < 4096; i++) p[i] = malloc(24);
  for (int i = 0; i < blocks && i < 4096; i++) free(p[i]);
  /* A heap region kept after it is freed: from the main heap (below the mmap threshold), never
   * trimmed. */
  mallopt(M_MMAP_THRESHOLD, RESERVE_CHUNK + 4096);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  void *reserve[RESERVE_CHUNKS];
  for (int i = 0; i < RESERVE_CHUNKS; i++) reserve[i] = malloc(RESERVE_CHUNK);
  for (int i = 0; i < RESERVE_CHUNKS; i++) free(reserve[i]);
  /* Blocks of the kept region, tracked, across all of it: a tracking map's part for every
   * address of it is mapped now (the region may straddle the 1 GiB boundary of the presence
   * and size maps' leaves), while mappings still succeed. Under 65,535 bytes, the size map's
   * largest. */
  enum { SPAN = 60000, SPANS = RESERVE_CHUNKS * (RESERVE_CHUNK / SPAN) };
  static void *span[SPANS];
  for (int i = 0; i < SPANS; i++) span[i] = malloc(SPAN);
  for (int i = 0; i < SPANS; i++) free(span[i]);
  /* free_track keeps freed blocks queued (at most 16384): push the reserve out of the queue. */
  for (int i = 0; i < 20000; i++) {
    void *volatile q = malloc(8);
    free(q);
  }
  printf("start\n");
  fflush(stdout);
  struct rlimit limit = {mapped_bytes(), RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &limit) != 0) {
    perror("setrlimit");
    return 2;
  }
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < blocks; i++) {
      p[i] = malloc(24 + (size_t)(i % 7) * 8);
      if (!p[i]) {
        printf("malloc failed in round %d at %d\n", r, i);
        return 1;
      }
      memset(p[i], 1, 24);
    }
    for (int i = 0; i < blocks; i += 2) {
      void *q = realloc(p[i], 200);
      if (!q) {
        printf("realloc failed in round %d at %d\n", r, i);
        return 1;
      }
      p[i] = q;
    }
    size_t usable = 0;
    for (int i = 0; i < blocks; i += 3) usable += malloc_usable_size(p[i]) >= 24;
    for (int i = 0; i < blocks; i++) free(p[i]);
    printf("round %d %s\n", r, usable == (size_t)(blocks + 2) / 3 ? "ok" : "bad usable size");
  }
  printf("done\n");
  fflush(stdout);
  if (argc == 4) {
    char *volatile q = malloc(24);
    free(q);
    free(q);
  }
  return 0;
}
