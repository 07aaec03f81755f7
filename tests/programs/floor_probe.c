// Run under benches/floor.c: prints what the shim left in and around a block, so a test can
// check that each FLOOR mode does the work it stands for (a floor that skipped its fills would
// understate the lower bound it is there to show).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  unsigned char* p = malloc(100);
  if (!p) return 1;
  printf("fresh %02x\n", p[99]);
  printf("front %02x\n", p[-1]);
  printf("rear %02x\n", p[100]);
  memset(p, 0x11, 100);
  unsigned char* q = realloc(p, 50);
  if (!q) return 1;
  printf("shrunk %02x\n", q[49]);
  free(q);
  return 0;
}
