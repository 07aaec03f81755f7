// Programs that close their standard error, under an exit leak report:
//   stderr_reuse reuse FILE   closes descriptor 2, opens FILE (which gets number 2), writes its
//                             data there, leaks a block (as a daemon that logs to a file)
//   stderr_reuse atexit       leaks a block and closes stderr in an exit handler of its own
//                             (as coreutils' close_stdout does, before malloc debug's report)
//   stderr_reuse closed-stdio leaks a block and exits with descriptors 0 and 1 closed, so that
//                             the next file opened would get number 0
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void* volatile leaked;

static void close_stderr(void) { fclose(stderr); }

int main(int argc, char** argv) {
  if (argc > 2 && strcmp(argv[1], "reuse") == 0) {
    close(2);
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    static const char data[] = "the program's own data\n";
    if (fd != 2 || write(fd, data, strlen(data)) != (ssize_t)strlen(data)) return 1;
    leaked = malloc(100);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "atexit") == 0) {
    atexit(close_stderr);
    leaked = malloc(200);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "closed-stdio") == 0) {
    leaked = malloc(300);
    close(0);
    close(1);
    return 0;
  }
  return 2;
}
