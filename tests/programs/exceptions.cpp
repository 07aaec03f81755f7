// Throws and catches 1000 C++ exceptions of several types (the unwinder and the exception
// objects allocate), building strings and containers along the way. Deterministic output.
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct Custom {
  std::vector<int> payload;
  explicit Custom(int n) : payload(static_cast<size_t>(n % 17 + 1), n) {}
};

static void thrower(int i, int depth) {
  std::vector<std::string> frame_locals(static_cast<size_t>(depth + 1), std::string(40, 'x'));
  if (depth > 0) {
    thrower(i, depth - 1);
    return;
  }
  switch (i % 4) {
    case 0:
      throw std::runtime_error("runtime error number " + std::to_string(i));
    case 1:
      throw std::out_of_range(std::string(static_cast<size_t>(i % 100), 'o'));
    case 2:
      throw Custom(i);
    default:
      throw std::make_shared<std::string>("shared " + std::to_string(i));
  }
}

int main() {
  std::map<std::string, long> counts;
  long total = 0;
  for (int i = 0; i < 1000; i++) {
    try {
      thrower(i, i % 7);
    } catch (const std::out_of_range& e) {
      counts["out_of_range"]++;
      total += static_cast<long>(std::string(e.what()).size());
    } catch (const std::exception& e) {
      counts["exception"]++;
      total += static_cast<long>(std::string(e.what()).size());
    } catch (const Custom& c) {
      counts["custom"]++;
      total += static_cast<long>(c.payload.size());
    } catch (const std::shared_ptr<std::string>& s) {
      counts["shared"]++;
      total += static_cast<long>(s->size());
    }
  }
  for (const auto& kv : counts) std::printf("%s %ld\n", kv.first.c_str(), kv.second);
  std::printf("total %ld\n", total);
  return 0;
}
