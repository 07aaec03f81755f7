// Unreachable checks racing frees in other threads. Each round the main thread fills a global
// table with blocks, raises SIGRTMAX-16 and lets the freeing threads go: the first of their
// frees runs the check while the others go on freeing. Every block is referenced from the table
// until its free returns (the slot is cleared after the free), and no thread allocates while a
// check can run, so any block a check reports is a false report.
//   unreachable_race ROUNDS   prints "rounds ROUNDS"
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 3
#define PER 64

static void *slots[THREADS][PER];
static atomic_int go;
static atomic_int finished;
static int rounds;

static void *freer(void *arg) {
    int t = (int)(long)arg;
    for (int r = 1; r <= rounds; r++) {
        while (atomic_load(&go) < r) sched_yield();
        for (int i = 0; i < PER; i++) {
            free(slots[t][i]);
            slots[t][i] = NULL;
        }
        atomic_fetch_add(&finished, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s ROUNDS\n", argv[0]);
        return 2;
    }
    rounds = atoi(argv[1]);
    pthread_t threads[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, freer, (void *)t);
    for (int r = 1; r <= rounds; r++) {
        for (int t = 0; t < THREADS; t++)
            for (int i = 0; i < PER; i++) slots[t][i] = malloc(24 + (size_t)i);
        raise(SIGRTMAX - 16);
        atomic_store(&go, r);
        // The check ran inside one of the frees: it is over once every thread is done.
        while (atomic_load(&finished) < THREADS * r) sched_yield();
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    printf("rounds %d\n", rounds);
    return 0;
}
