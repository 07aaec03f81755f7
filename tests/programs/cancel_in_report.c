// A thread cancelled while malloc debug reports: the worker overflows a block by one byte and
// frees it, again and again, so that it spends most of its time inside the library's error
// report (writes to stderr, reads of /proc for symbols: cancellation points), and tests for
// cancellation in its own loop. main cancels it, joins it, and allocates again.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void* worker(void* arg) {
  (void)arg;
  for (;;) {
    char* volatile p = malloc(16);
    p[16] = 1;  // into the rear guard: the free reports it
    free(p);
    pthread_testcancel();
  }
  return NULL;
}

int main(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
  usleep(50 * 1000);
  pthread_cancel(t);
  void* result;
  pthread_join(t, &result);
  void* volatile q = malloc(10);
  free(q);
  printf("cancelled=%d\n", result == PTHREAD_CANCELED);
  return 0;
}
