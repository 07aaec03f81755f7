// The README's demo: a small program with two classic heap bugs, run under malloc debug by
// scripts/demo. Its output is normal; malloc debug's log (stderr) reports both bugs with the
// backtraces that lead to them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Copies a name into a buffer one byte too small: the terminating NUL lands on the rear guard.
__attribute__((noinline)) char* copy_name(const char* name) {
  char* copy = malloc(strlen(name));
  strcpy(copy, name);
  return copy;
}

// Builds a greeting and forgets to free it.
__attribute__((noinline)) char* make_greeting(const char* name) {
  char* greeting = malloc(64);
  snprintf(greeting, 64, "hello, %s", name);
  return greeting;
}

int main(void) {
  char* name = copy_name("malloc debug");
  printf("%s\n", make_greeting(name));
  free(name);  // the overflow is found here
  return 0;    // the greeting is reported as a leak at exit
}
