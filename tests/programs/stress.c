// 8 threads doing 1,000,000 mixed malloc/calloc/realloc/memalign/posix_memalign/free calls in
// total, checking every block's contents before it is resized or freed. The output depends only
// on the fixed seeds, so runs with and without the front must print the same.
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 8
#define OPS_PER_THREAD (1000000 / THREADS)
#define SLOTS 256

struct slot {
  unsigned char* p;
  size_t size;
  unsigned char fill;
};

struct result {
  uint64_t seed;
  unsigned long long checksum;
  unsigned long errors;
  unsigned long ops[6];
};

static uint64_t next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t pick_size(uint64_t* rng) {
  uint64_t r = next(rng);
  switch (r % 16) {
    case 0:
      return (size_t)(r >> 8) % 65536;  // medium
    case 1:
      return (r >> 8) % 64 == 0 ? (size_t)(r >> 16) % (1 << 20) : 0;  // rare large, or zero
    default:
      return (size_t)(r >> 8) % 512;  // small
  }
}

static int check(const struct slot* s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s->p[i] != s->fill) return 1;
  }
  return 0;
}

static void* worker(void* arg) {
  struct result* res = arg;
  uint64_t rng = 0x9e3779b97f4a7c15ULL ^ res->seed;
  struct slot slots[SLOTS];
  memset(slots, 0, sizeof(slots));
  for (long op = 0; op < OPS_PER_THREAD; op++) {
    struct slot* s = &slots[next(&rng) % SLOTS];
    unsigned kind = (unsigned)(next(&rng) % 6);
    if (s->p != NULL && kind != 3) {
      // Free (or check) whatever is in the slot first.
      res->errors += (unsigned long)check(s, s->size);
      res->checksum = res->checksum * 31 + s->size + s->fill;
      free(s->p);
      s->p = NULL;
      res->ops[5]++;
      continue;
    }
    size_t size = pick_size(&rng);
    unsigned char fill = (unsigned char)next(&rng);
    unsigned char* p = NULL;
    switch (kind) {
      case 0:
        p = malloc(size);
        break;
      case 1:
        p = calloc(1, size);
        for (size_t i = 0; p != NULL && i < size; i++) res->errors += p[i] != 0;
        break;
      case 2:
        p = memalign((size_t)16 << (next(&rng) % 8), size);
        break;
      case 3:
        if (s->p != NULL) res->errors += (unsigned long)check(s, s->size);
        p = realloc(s->p, size);
        if (p != NULL && s->p != NULL) {
          size_t keep = size < s->size ? size : s->size;
          for (size_t i = 0; i < keep; i++) res->errors += p[i] != s->fill;
        }
        s->p = NULL;
        if (p == NULL && size == 0) {
          res->ops[kind]++;
          continue;  // realloc(p, 0) freed it
        }
        break;
      case 4: {
        void* q = NULL;
        if (posix_memalign(&q, (size_t)8 << (next(&rng) % 10), size) != 0) q = NULL;
        p = q;
        break;
      }
      default:
        p = malloc(size);
        break;
    }
    res->ops[kind]++;
    if (p == NULL) {
      if (size != 0) res->errors++;
      continue;
    }
    if (malloc_usable_size(p) < size) res->errors++;
    memset(p, fill, size);
    s->p = p;
    s->size = size;
    s->fill = fill;
    res->checksum = res->checksum * 31 + size;
  }
  for (int i = 0; i < SLOTS; i++) {
    if (slots[i].p != NULL) {
      res->errors += (unsigned long)check(&slots[i], slots[i].size);
      free(slots[i].p);
    }
  }
  return NULL;
}

int main(void) {
  pthread_t threads[THREADS];
  struct result results[THREADS];
  memset(results, 0, sizeof(results));
  for (int i = 0; i < THREADS; i++) {
    results[i].seed = 0x1234567ULL * (uint64_t)(i + 1);
    if (pthread_create(&threads[i], NULL, worker, &results[i]) != 0) {
      printf("pthread_create failed\n");
      // The started workers write into `results`, on this stack: wait for them first.
      for (int j = 0; j < i; j++) pthread_join(threads[j], NULL);
      return 1;
    }
  }
  unsigned long errors = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    printf("thread %d: checksum %016llx ops %lu %lu %lu %lu %lu %lu errors %lu\n", i,
           results[i].checksum, results[i].ops[0], results[i].ops[1], results[i].ops[2],
           results[i].ops[3], results[i].ops[4], results[i].ops[5], results[i].errors);
    errors += results[i].errors;
  }
  printf("%s\n", errors == 0 ? "stress ok" : "stress FAILED");
  return errors == 0 ? 0 : 1;
}
