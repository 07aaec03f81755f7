/* The front's log sink: logcat "threadtime" records on stderr, and libc's error_log. */
#include "front.h"

/* ------------------------------------------------------------------------------------------ */
/* Log sink: logcat "threadtime" layout on stderr, UTC, no allocation.                        */
/* ------------------------------------------------------------------------------------------ */

struct out_buf {
  char data[1536];
  size_t len;
};

static void out_bytes(struct out_buf* b, const char* s, size_t n) {
  size_t room = sizeof(b->data) - b->len;
  if (n > room) n = room;
  memcpy(b->data + b->len, s, n);
  b->len += n;
}

static void out_str(struct out_buf* b, const char* s) { out_bytes(b, s, strlen(s)); }

/* Decimal, right-aligned in `width` columns, padded with `pad`. */
static void out_num(struct out_buf* b, long long v, int width, char pad) {
  char tmp[24];
  int n = 0;
  bool neg = v < 0;
  unsigned long long u = neg ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (neg) tmp[n++] = '-';
  for (int i = n; i < width; i++) out_bytes(b, &pad, 1);
  while (n > 0) out_bytes(b, &tmp[--n], 1);
}

/* Days since 1970-01-01 to month/day (proleptic Gregorian, Hinnant's civil_from_days). */
static void civil_from_days(long long days, int* month, int* day) {
  long long z = days + 719468;
  long long era = (z >= 0 ? z : z - 146096) / 146097;
  long long doe = z - era * 146097;
  long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  long long mp = (5 * doy + 2) / 153;
  *day = (int)(doy - (153 * mp + 2) / 5 + 1);
  *month = (int)(mp < 10 ? mp + 3 : mp - 9);
}

static void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

/* One log record: every line of `msg` gets the prefix; one write(2) per line. */
void log_record(char prio, const char* tag, const char* msg) {
  struct timespec ts = {0, 0};
  clock_gettime(CLOCK_REALTIME, &ts);
  long long secs = (long long)ts.tv_sec;
  long long days = (secs >= 0 ? secs : secs - 86399) / 86400;
  long long sod = secs - days * 86400;
  int month, day;
  civil_from_days(days, &month, &day);

  struct out_buf prefix = {.len = 0};
  out_num(&prefix, month, 2, '0');
  out_str(&prefix, "-");
  out_num(&prefix, day, 2, '0');
  out_str(&prefix, " ");
  out_num(&prefix, sod / 3600, 2, '0');
  out_str(&prefix, ":");
  out_num(&prefix, sod / 60 % 60, 2, '0');
  out_str(&prefix, ":");
  out_num(&prefix, sod % 60, 2, '0');
  out_str(&prefix, ".");
  out_num(&prefix, ts.tv_nsec / 1000000, 3, '0');
  out_str(&prefix, " ");
  out_num(&prefix, getpid(), 5, ' ');
  out_str(&prefix, " ");
  out_num(&prefix, syscall(SYS_gettid), 5, ' ');
  out_str(&prefix, " ");
  out_bytes(&prefix, &prio, 1);
  out_str(&prefix, " ");
  out_str(&prefix, tag);
  for (size_t i = strlen(tag); i < 8; i++) out_str(&prefix, " ");
  out_str(&prefix, ": ");

  size_t len = strlen(msg);
  /* A trailing newline ends the last line rather than starting an empty one. */
  if (len > 0 && msg[len - 1] == '\n') len--;
  const char* line = msg;
  const char* end = msg + len;
  for (;;) {
    const char* nl = memchr(line, '\n', (size_t)(end - line));
    const char* line_end = nl != NULL ? nl : end;
    struct out_buf out = prefix;
    out_bytes(&out, line, (size_t)(line_end - line));
    if (out.len == sizeof(out.data)) out.len--;
    out.data[out.len++] = '\n';
    write_all(STDERR_FILENO, out.data, out.len);
    if (nl == NULL) break;
    line = nl + 1;
  }
}

const char* progname(void) {
  const char* p = program_invocation_short_name;
  return p != NULL ? p : "";
}

/* libc's error_log (tag "libc", priority ERROR). Simple %s/%d formats only: glibc's snprintf
 * does not allocate for them. */
__attribute__((format(printf, 1, 2))) void libc_error_log(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  log_record('E', "libc", msg);
}
