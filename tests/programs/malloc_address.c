// Takes malloc's address and leaks one block through it. Built -no-pie, its malloc is then an
// undefined symbol whose value is its PLT entry: the canonical address of malloc for the whole
// process, which dlsym(RTLD_DEFAULT, "malloc") returns, though calls still reach the front.
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  // Taken in code (an absolute immediate in non-PIE code), which is what makes the linker give
  // malloc a canonical PLT entry; a static initializer would use a dynamic relocation instead.
  void* (*volatile allocate)(size_t);
  allocate = malloc;
  void* leaked = allocate(48);
  printf("leaked=%p\n", leaked);
  return 0;
}
