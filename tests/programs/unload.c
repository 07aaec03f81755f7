/* Issue 20.2: blocks allocated from a module that is unloaded before the exit report and heap
 * dump. argv[1] is the module. Prints the module function's address range so the test can
 * check how its (now unmapped) frames are printed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *keep[2];

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h)
    return 3;
  void *(*alloc)(size_t) = (void *(*)(size_t))dlsym(h, "module_alloc");
  if (!alloc)
    return 4;
  keep[0] = alloc(4321);
  keep[1] = alloc(4321);
  printf("module_alloc %lx\n", (unsigned long)alloc);
  fflush(stdout);
  dlclose(h);
  return 0;
}
