/* Says on stdout whether its stderr is a pipe, then leaks one block from `make`. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char* volatile slot;

__attribute__((noinline)) char* make(size_t n) { return malloc(n); }

int main(void) {
  struct stat st;
  fstat(2, &st);
  printf("%s\n", S_ISFIFO(st.st_mode) ? "pipe" : "not a pipe");
  slot = make(20);
  return 0;
}
