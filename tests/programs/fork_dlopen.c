// Forks while other threads dlopen and dlclose a library in a loop; every child allocates (so
// that, under the backtrace option, it walks stacks no walk of the parent cached) and exits.
//   fork_dlopen LIB N        prints "children N hung H failed F"
//   fork_dlopen LIB N leak   the same, each child leaking a 4242-byte block from its own code
//                            and a 4343-byte one from LIB's (which the main thread keeps loaded)
//                            and exiting with exit(), so that leak_track reports both with
//                            their backtraces; also prints "child PID" for each child
//   fork_dlopen LIB N leak-single   as leak, without the loading threads
// A child that has not exited 10 s after the last fork counts as hung (and is killed): this is a
// hang detector, not a timing threshold. "failed" counts children that exited otherwise than
// with status 0.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LOADERS 3
#define HANG_SECONDS 10

static const char *lib;
static int leak;
static void *(*lib_alloc)(size_t);
static volatile int stop;
static volatile int cycles;

static void *loader(void *arg) {
    (void)arg;
    while (!stop) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (h != NULL) dlclose(h);
        __atomic_add_fetch(&cycles, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

// Call sites the parent never runs: the child's first walks miss the unwinder's caches.
__attribute__((noinline)) static void *child_alloc(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}

__attribute__((noinline)) static void child_work(int i) {
    void *blocks[16];
    for (int k = 0; k < 16; k++) blocks[k] = child_alloc(16 + (size_t)k + (size_t)(i % 7));
    for (int k = 0; k < 16; k++) free(blocks[k]);
    if (leak) exit(child_alloc(4242) == NULL || lib_alloc(4343) == NULL ? 2 : 0);
    _exit(blocks[0] == NULL ? 2 : 0);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int single = argc == 4 && strcmp(argv[3], "leak-single") == 0;
    if (argc != 3 && !(argc == 4 && (strcmp(argv[3], "leak") == 0 || single))) {
        fprintf(stderr, "usage: %s LIB N [leak|leak-single]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    lib = argv[1];
    leak = argc == 4;
    if (leak) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        lib_alloc = h != NULL ? (void *(*)(size_t))dlsym(h, "fork_dlopen_lib_alloc") : NULL;
        if (lib_alloc == NULL) {
            fprintf(stderr, "cannot load %s: %s\n", lib, dlerror());
            return 2;
        }
    }
    int loaders = single ? 0 : LOADERS;
    int n = atoi(argv[2]);
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    pthread_t threads[LOADERS];
    for (int t = 0; t < loaders; t++) pthread_create(&threads[t], NULL, loader, NULL);

    // The loaders are running before the first fork.
    while (__atomic_load_n(&cycles, __ATOMIC_RELAXED) < 10 * loaders) usleep(1000);

    int live = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) child_work(i);
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        pids[i] = pid;
        live++;
        if (leak) printf("child %d\n", (int)pid);
        // Reap what has finished, so that hung children do not exhaust the process limit.
        int status;
        pid_t done;
        while ((done = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int k = 0; k <= i; k++)
                if (pids[k] == done) pids[k] = 0;
            live--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
        }
    }
    stop = 1;
    for (int t = 0; t < loaders; t++) pthread_join(threads[t], NULL);

    double deadline = now() + HANG_SECONDS;
    while (live > 0 && now() < deadline) {
        int status;
        pid_t done = waitpid(-1, &status, WNOHANG);
        if (done > 0) {
            for (int k = 0; k < n; k++)
                if (pids[k] == done) pids[k] = 0;
            live--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
        } else {
            usleep(10000);
        }
    }
    int hung = 0;
    for (int k = 0; k < n; k++) {
        if (pids[k] != 0) {
            hung++;
            kill(pids[k], SIGKILL);
            waitpid(pids[k], NULL, 0);
        }
    }
    printf("children %d hung %d failed %d\n", n, hung, failed);
    free(pids);
    return 0;
}
