// exit_fds: a thread opens and closes a directory in a loop while the main thread calls exit().
// The standard descriptors 0-2 stay open for the whole run, so the thread must never be given
// one of them, and a descriptor it holds must stay the directory it opened. Each violation is
// written to a copy of stderr made at start (the exit handlers may be working on fd 2).
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int report_fd;
static volatile int looping;

static void report(const char* what, int fd) {
  char line[64];
  int n = snprintf(line, sizeof(line), "%s %d\n", what, fd);
  write(report_fd, line, (size_t)n);
}

static void* opener(void* arg) {
  (void)arg;
  for (;;) {
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    looping = 1;
    if (fd < 0) continue;
    if (fd <= 2) report("given standard descriptor", fd);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) report("descriptor replaced", fd);
    close(fd);
  }
  return NULL;
}

int main(void) {
  report_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  // Buffered output and a read from stdin: the exit handler has buffers to release.
  printf("exit_fds\n");
  pthread_t t;
  pthread_create(&t, NULL, opener, NULL);
  while (!looping) {
  }
  for (int i = 0; i < 1000; i++) free(malloc(32));
  exit(0);
}
