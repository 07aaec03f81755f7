// Issue 23.4: C++ names in backtraces are demangled with the C++ runtime's __cxa_demangle
// (the program uses operator new, so libstdc++ / libc++ is loaded).
#include <cstdio>
#include <cstdlib>

namespace outer {
struct Leaker {
  __attribute__((noinline)) static void *make(int n) {
    void *p = std::malloc(static_cast<size_t>(n));
    __asm__ volatile("" ::: "memory");
    return p;
  }
};
}  // namespace outer

int main() {
  delete new int(1);
  void *p = outer::Leaker::make(1234);
  std::printf("%d\n", p != nullptr);
  return 0;
}
