// Plays bionic's part for the backtrace family: dlopens libc_malloc_debug.so and drives one
// scenario per process through the leak-info, malloc_backtrace and heap-dump entry points.
// Usage: driver LIB SCENARIO OPTIONS [PATH]
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>

#include "../abi/bionic.h"

#define FRAMES 16

struct leak {
  uint8_t* info;
  size_t overall, info_size, total, bt_size;
};

static struct leak get_leak(void) {
  struct leak l;
  d_get_malloc_leak_info(&l.info, &l.overall, &l.info_size, &l.total, &l.bt_size);
  return l;
}
static size_t entry_size(const struct leak* l, size_t i) {
  return *(size_t*)(l->info + i * l->info_size);
}
static size_t entry_num(const struct leak* l, size_t i) {
  return *(size_t*)(l->info + i * l->info_size + sizeof(size_t));
}
static uintptr_t* entry_frames(const struct leak* l, size_t i) {
  return (uintptr_t*)(l->info + i * l->info_size + 2 * sizeof(size_t));
}

// Distinct call sites: each is its own frame in the captured stacks.
__attribute__((noinline)) static void* site_a(size_t n) {
  void* p = d_malloc(n);
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) static void* site_b(size_t n) {
  void* p = d_malloc(n);
  __asm__ volatile("" ::: "memory");
  return p;
}

static void print_leak(const struct leak* l) {
  printf("overall=%zu info_size=%zu total=%zu bt_size=%zu\n", l->overall, l->info_size, l->total,
         l->bt_size);
  size_t n = l->info_size ? l->overall / l->info_size : 0;
  for (size_t i = 0; i < n; i++) {
    uintptr_t* f = entry_frames(l, i);
    size_t k = 0;
    while (k < l->bt_size && f[k] != 0) k++;
    printf("entry size=%#zx num=%zu frames=%zu\n", entry_size(l, i), entry_num(l, i), k);
  }
}

static void leak_info(void) {
  void* a[3];
  // volatile bound: an unrolled loop would give three different return addresses.
  for (volatile int i = 0; i < 3; i++) a[i] = site_a(300);
  void* b = site_b(200);
  void* c = site_a(100);
  zygote_child = true;
  void* z = site_a(400);
  zygote_child = false;

  struct leak l = get_leak();
  print_leak(&l);
  CHECK(l.bt_size == FRAMES);
  CHECK(l.info_size == 2 * sizeof(size_t) + sizeof(uintptr_t) * FRAMES);
  CHECK(l.overall == 4 * l.info_size);
  CHECK(l.total == 300 * 3 + 200 + 100 + 400);
  // Non-zygote first by size descending, zygote last with bit 31.
  CHECK(entry_size(&l, 0) == 300 && entry_num(&l, 0) == 3);
  CHECK(entry_size(&l, 1) == 200 && entry_num(&l, 1) == 1);
  CHECK(entry_size(&l, 2) == 100 && entry_num(&l, 2) == 1);
  CHECK(entry_size(&l, 3) == (400 | (1u << 31)) && entry_num(&l, 3) == 1);
  for (size_t i = 0; i < 4; i++) CHECK(entry_frames(&l, i)[0] != 0);
  // Different call sites never share a record.
  CHECK(memcmp(entry_frames(&l, 0), entry_frames(&l, 1), sizeof(uintptr_t) * FRAMES) != 0);

  // malloc_backtrace (docs/spec/abi.md#malloc_backtrace) returns the recorded frames.
  uintptr_t f0[FRAMES], f1[FRAMES], fb[FRAMES];
  ssize_t n0 = d_malloc_backtrace(a[0], f0, FRAMES);
  ssize_t n1 = d_malloc_backtrace(a[2], f1, FRAMES);
  ssize_t nb = d_malloc_backtrace(b, fb, FRAMES);
  printf("malloc_backtrace=%zd %zd %zd\n", n0, n1, nb);
  CHECK(n0 > 0 && n0 == n1 && nb > 0);
  CHECK(memcmp(f0, f1, sizeof(uintptr_t) * (size_t)n0) == 0);
  CHECK(memcmp(f0, entry_frames(&l, 0), sizeof(uintptr_t) * (size_t)n0) == 0);
  CHECK(n0 != nb || memcmp(f0, fb, sizeof(uintptr_t) * (size_t)n0) != 0);
  CHECK(d_malloc_backtrace(a[0], f0, 1) == 1);
  d_free_malloc_leak_info(l.info);
  d_free_malloc_leak_info(NULL);

  for (int i = 0; i < 3; i++) d_free(a[i]);
  d_free(b);
  d_free(c);
  d_free(z);
  l = get_leak();
  print_leak(&l);
  CHECK(l.info == NULL && l.overall == 0 && l.info_size == 0 && l.total == 0 && l.bt_size == 0);
}

// Only adjacent equal elements merge (docs/spec/abi.md#list-order-and-merging): two stacks of equal
// size and depth interleave.
static void adjacency(void) {
  void* p[8];
  for (volatile int i = 0; i < 8; i++) p[i] = (i & 1) ? site_b(64) : site_a(64);
  struct leak l = get_leak();
  print_leak(&l);
  size_t n = l.overall / l.info_size, sum = 0;
  for (size_t i = 0; i < n; i++) {
    CHECK(entry_size(&l, i) == 64);
    sum += entry_num(&l, i);
    if (i > 0) {
      CHECK(memcmp(entry_frames(&l, i - 1), entry_frames(&l, i), sizeof(uintptr_t) * FRAMES) != 0);
    }
  }
  CHECK(sum == 8 && n >= 2);
  d_free_malloc_leak_info(l.info);
  for (int i = 0; i < 8; i++) d_free(p[i]);
}

static void size_filter(void) {
  void* small = site_a(50);
  void* mid = site_a(150);
  void* big = site_a(500);
  struct leak l = get_leak();
  print_leak(&l);
  d_free_malloc_leak_info(l.info);
  d_free(small);
  d_free(mid);
  d_free(big);
}

static void enable_on_signal(void) {
  void* before = site_a(100);
  raise(SIGRTMAX - 19);
  void* after = site_a(200);
  struct leak l = get_leak();
  print_leak(&l);
  d_free_malloc_leak_info(l.info);
  d_free(before);
  d_free(after);
}

static size_t named_lines(char* text, size_t len);

static size_t read_all(const char* path, char* buf, size_t cap) {
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0);
  size_t len = 0;
  ssize_t n;
  while (len < cap && (n = read(fd, buf + len, cap - len)) > 0) len += (size_t)n;
  close(fd);
  CHECK(len < cap);
  return len;
}

// The dump's MAPS section is /proc/self/maps as read, followed by END.
static int maps_equal(const char* dump) {
  static char d[1 << 20], m[1 << 20];
  if (access(dump, F_OK) != 0) return -1;
  size_t dl = read_all(dump, d, sizeof(d));
  size_t ml = read_all("/proc/self/maps", m, sizeof(m));
  d[dl] = 0;
  char* maps = strstr(d, "\nMAPS\n");
  CHECK(maps != NULL);
  maps += 6;
  size_t rest = dl - (size_t)(maps - d);
  if (rest < 4 || memcmp(maps + rest - 4, "END\n", 4) != 0) return 0;
  size_t fl = named_lines(maps, rest - 4), gl = named_lines(m, ml);
  return fl == gl && memcmp(maps, m, fl) == 0;
}

// Keeps only lines naming a file or [region] (compacted in place): the dumper's own transient
// buffer can resize an anonymous mapping between its read and ours.
static size_t named_lines(char* text, size_t len) {
  size_t out = 0, start = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] != '\n') continue;
    if (i > start && text[i - 1] != ' ') {
      memmove(text + out, text + start, i + 1 - start);
      out += i + 1 - start;
    }
    start = i + 1;
  }
  return out;
}

static volatile int stop_allocating;
static void* allocate_loop(void* arg) {
  (void)arg;
  while (!stop_allocating) {
    void* p = site_a(64);
    void* q = site_b(128);
    d_free(p);
    d_free(q);
  }
  return NULL;
}

// A fork while another thread is inside the unwinder or the tables must not deadlock the child.
static void fork_while_unwinding(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, allocate_loop, NULL) == 0);
  for (int i = 0; i < 1000; i++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      alarm(60);  // a deadlocked child dies by SIGALRM, which the parent reports
      void* p = site_b(32);
      d_free(p);
      _exit(p != NULL ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  stop_allocating = 1;
  CHECK(pthread_join(t, NULL) == 0);
  printf("forks=1000\n");
}

int main(int argc, char** argv) {
  if (argc < 4) {
    printf("usage: driver LIB SCENARIO OPTIONS [PATH]\n");
    return 2;
  }
  load(argv[1]);
  const char* scenario = argv[2];
  const char* options = argv[3];
  const char* path = argc > 4 ? argv[4] : "";
  if (!init(options)) return 3;
  if (strcmp(scenario, "leak-info") == 0) {
    leak_info();
  } else if (strcmp(scenario, "leak-empty") == 0) {
    struct leak l = get_leak();
    print_leak(&l);
    CHECK(l.info == NULL && l.overall == 0 && l.total == 0);
  } else if (strcmp(scenario, "leak-one") == 0) {
    void* p = site_a(10);
    struct leak l = get_leak();
    print_leak(&l);
    d_free_malloc_leak_info(l.info);
    d_free(p);
  } else if (strcmp(scenario, "leak-null") == 0) {
    uint8_t* info = (uint8_t*)1;
    size_t a = 1, b = 1, c = 1;
    void* p = site_a(10);
    d_get_malloc_leak_info(&info, &a, &b, &c, NULL);
    CHECK(info == (uint8_t*)1 && a == 1 && b == 1 && c == 1);
    d_free(p);
  } else if (strcmp(scenario, "adjacency") == 0) {
    adjacency();
  } else if (strcmp(scenario, "size-filter") == 0) {
    size_filter();
  } else if (strcmp(scenario, "enable-on-signal") == 0) {
    enable_on_signal();
  } else if (strcmp(scenario, "dump-heap") == 0) {
    void* a[2];
    for (volatile int i = 0; i < 2; i++) a[i] = site_a(300);
    void* b = site_b(20);
    zygote_child = true;
    void* z = site_b(1000000000);
    zygote_child = false;
    d_dump_heap(path);
    printf("maps-equal=%d\n", maps_equal(path));
    d_free(a[0]);
    d_free(a[1]);
    d_free(b);
    d_free(z);
  } else if (strcmp(scenario, "write-leak-info") == 0) {
    void* a = site_a(77);
    FILE* f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "before\n");
    printf("write=%d\n", d_write_malloc_leak_info(f));
    fprintf(f, "after\n");
    fclose(f);
    d_free(a);
  } else if (strcmp(scenario, "dump-on-signal") == 0) {
    void* a = site_a(123);
    raise(SIGRTMAX - 17);
    void* b = d_malloc(1);
    d_free(b);
    d_free(a);
  } else if (strcmp(scenario, "dump-on-signal-free") == 0) {
    void* a = site_a(123);
    void* b = site_b(45);
    raise(SIGRTMAX - 17);
    d_free(a);  // the dump runs here, before `a` leaves the table
    d_free(b);
  } else if (strcmp(scenario, "fork-unwind") == 0) {
    fork_while_unwinding();
  } else {
    printf("unknown scenario %s\n", scenario);
    return 2;
  }
  printf("done\n");
  return 0;
}
