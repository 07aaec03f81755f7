// Leaks one block made by reallocarray (8 * 4 bytes) and prints its address: under the front,
// reallocarray is Android 17's dispatch entry, so the library's leak report must name it.
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  void* p = reallocarray(NULL, 8, 4);
  errno = 0;
  void* q = reallocarray(p, SIZE_MAX / 2, 3);
  printf("leaked=%p overflow=%s\n", p, q == NULL && errno == ENOMEM ? "ENOMEM" : "?");
  return 0;
}
