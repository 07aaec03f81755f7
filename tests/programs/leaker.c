// A real program for the backtrace dumps under the glibc front.
//   leaker exit          leaks from leaky_function, prints the totals the front's exported
//                        get_malloc_leak_info reports, then exits (exit dump).
//   leaker churn         allocates from 8192 distinct call sites three times over, freeing all
//                        but eight blocks of the last round (backtrace records are collected
//                        on the way; the eight must keep theirs), then exits (exit dump).
//   leaker signal PATH   runs allocating threads and waits until PATH exists (the test sends
//                        SIGRTMAX-17 once "ready" is printed).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call_sites.h"

typedef void (*get_fn)(uint8_t**, size_t*, size_t*, size_t*, size_t*);
typedef void (*free_fn)(uint8_t*);

static void* volatile sink[64];

__attribute__((noinline)) void leaky_function(int i) {
  sink[i] = malloc(1000 + (size_t)i % 3);
  __asm__ volatile("" ::: "memory");
}

static volatile int stop;
static void* churn(void* arg) {
  (void)arg;
  while (!stop) free(malloc(48));
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "churn") == 0) {
    for (int round = 0; round < 3; round++) {
      for (unsigned i = 0; i < CALL_SITES; i++) {
        void* p = alloc_at_site(i);
        if (round == 2 && i % 1024 == 7) {
          sink[i / 1024] = p;
        } else {
          free(p);
        }
      }
    }
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "exit") == 0) {
    // No stdio here: glibc frees stdout's buffer at exit, after the leak info was taken.
    for (int i = 0; i < 30; i++) leaky_function(i);
    free(malloc(5000));
    get_fn get = (get_fn)dlsym(RTLD_DEFAULT, "get_malloc_leak_info");
    free_fn release = (free_fn)dlsym(RTLD_DEFAULT, "free_malloc_leak_info");
    if (get == NULL || release == NULL) return 2;
    uint8_t* info;
    size_t overall, info_size, total, bt_size;
    get(&info, &overall, &info_size, &total, &bt_size);
    size_t records = info_size ? overall / info_size : 0;
    release(info);
    char line[128];
    int n = snprintf(line, sizeof(line), "total=%zu records=%zu bt_size=%zu\n", total, records,
                     bt_size);
    if (write(1, line, (size_t)n) != n) return 3;
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "signal") == 0) {
    alarm(60);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churn, NULL);
    for (int i = 0; i < 5; i++) leaky_function(i);
    printf("ready %d\n", getpid());
    fflush(stdout);
    struct stat st;
    while (stat(argv[2], &st) != 0) free(malloc(16));
    stop = 1;
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("seen\n");
    return 0;
  }
  return 2;
}
