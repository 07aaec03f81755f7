/* Issue 20.1: a failed dlopen leaves glibc holding an error string allocated through malloc
 * debug; a report that then made glibc free it while the thread was marked "inside the library"
 * sent it to the native allocator (and the next one back through the library: UNKNOWN POINTER).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  void *h = dlopen("/nonexistent/libnothing.so", RTLD_NOW);
  printf("first: %s\n", h ? "loaded" : dlerror() ? "failed" : "?");
  fflush(stdout);
  char *volatile p = malloc(10);
  free(p);
  free(p); /* one report, with a backtrace to symbolize */
  h = dlopen("/nonexistent/libnothing2.so", RTLD_NOW);
  printf("second: %s\n", h ? "loaded" : dlerror() ? "failed" : "?");
  return 0;
}
