/*
 * An evenly paced HTTP/1.1 load generator (bench/lib/paced.ts builds and drives it), for
 * `--paced R`: request k of the run is due at start + k/R seconds and goes out at that time on
 * a free keep-alive connection (one request at a time per connection, as autocannon's
 * pipelining 1). autocannon's own rate (overallRate) is a per-second quota that each
 * connection spends as fast as it can and then waits for the next second: bursts at full
 * speed, then idle. Paced, every server under test sees the same arrival times, so its CPU per
 * request is its cost at that load and not how well it batches a burst.
 *
 * Latency is measured from the due time, not the send time: a request that waits for a free
 * connection counts its wait (no coordinated omission).
 *
 * stdin:  "<port> <connections> <rate> <duration_ms>\n", then k requests ("<k>\n", then each
 *         "<len>\n" + len bytes); request j of the run is request j % k of the list.
 * stdout: one line of JSON once the run is over (every answer in, or 10 s after the last send):
 *         {"requests":..,"answered":..,"non2xx":..,"errors":..,"late":..,"p50_us":..,"p99_us":..,
 *          "max_us":..,"seconds":..,"cpu_us":..}
 *         `late`: requests that went out more than 1 ms after their due time (no connection free
 *         or the generator itself behind).
 * PACED_TRACE=<file> (environment): every answer slower than PACED_TRACE_US (default 5000) is
 *         also written there as "<due> <latency>" in CLOCK_MONOTONIC nanoseconds, to line up with
 *         `perf record -k CLOCK_MONOTONIC` (what ran on the cores while an answer was late).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  int fd;
  int busy;
  int dead;
  long long due;
  /* Bytes of the current answer seen so far, and its full length once the head is parsed (-1 before). */
  char head[4096];
  int headlen;
  long long bodyleft;
  int headdone;
  int status;
} Conn;

static Conn *cs;
static int nconn, port, nreq, ep, alive;
static char **reqs;
static int *reqlens;
static int *idle;
static int nidle;
static long long *lat;
/* Due times of the answers (only with PACED_TRACE). */
static long long *dues;
static long long sent, answered, non2xx, errors, late;
static char buf[65536];

static long long now_ns (void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void die (const char *what) { perror(what); exit(2); }

/* A connection the server closed (or that failed): never used again. */
static void drop (Conn *c) {
  if (c->dead) return;
  c->dead = 1;
  c->busy = 0;
  alive--;
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
}

static int cmp (const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}

static int read_line (char *out, int max) {
  int i = 0, c;
  while ((c = getchar()) != EOF && c != '\n') if (i < max - 1) out[i++] = (char)c;
  out[i] = 0;
  return c == EOF && i == 0 ? -1 : i;
}

/* The answer on `c` is complete: record it and free the connection. */
static void finish (Conn *c, long long t) {
  if (dues != NULL) dues[answered] = c->due;
  lat[answered++] = t - c->due;
  if (c->status < 200 || c->status > 299) non2xx++;
  c->busy = 0;
  c->headlen = 0;
  c->headdone = 0;
  idle[nidle++] = (int)(c - cs);
}

/* Consumes `len` bytes of an answer; returns 0, or -1 on a malformed one. */
static int consume (Conn *c, const char *p, int len, long long t) {
  while (len > 0) {
    if (!c->headdone) {
      int take = len < (int)sizeof c->head - 1 - c->headlen ? len : (int)sizeof c->head - 1 - c->headlen;
      if (take <= 0) return -1;
      memcpy(c->head + c->headlen, p, take);
      c->headlen += take;
      c->head[c->headlen] = 0;
      char *end = strstr(c->head, "\r\n\r\n");
      if (end == NULL) { p += take; len -= take; continue; }
      int headbytes = (int)(end - c->head) + 4;
      int extra = c->headlen - headbytes;
      c->status = atoi(c->head + 9);
      long long clen = 0;
      for (char *h = c->head; (h = strchr(h, '\n')) != NULL;) {
        h++;
        if (strncasecmp(h, "content-length:", 15) == 0) { clen = atoll(h + 15); break; }
      }
      c->headdone = 1;
      c->bodyleft = clen - extra;
      p += take;
      len -= take;
      if (c->bodyleft < 0) return -1; /* more than one answer at a time: not expected */
    } else {
      long long take = len < c->bodyleft ? len : c->bodyleft;
      c->bodyleft -= take;
      p += take;
      len -= (int)take;
      if (len > 0 && c->bodyleft == 0) return -1;
    }
    if (c->headdone && c->bodyleft == 0) { finish(c, t); if (len > 0) return -1; }
  }
  return 0;
}

int main (void) {
  char line[256];
  double rate;
  long long duration_ms;
  signal(SIGPIPE, SIG_IGN);
  if (read_line(line, sizeof line) < 0 || sscanf(line, "%d %d %lf %lld", &port, &nconn, &rate, &duration_ms) != 4) die("header");
  if (read_line(line, sizeof line) < 0 || (nreq = atoi(line)) <= 0) die("request count");
  reqs = calloc(nreq, sizeof *reqs);
  reqlens = calloc(nreq, sizeof *reqlens);
  for (int i = 0; i < nreq; i++) {
    if (read_line(line, sizeof line) < 0) die("request length");
    reqlens[i] = atoi(line);
    reqs[i] = malloc(reqlens[i]);
    if (fread(reqs[i], 1, reqlens[i], stdin) != (size_t)reqlens[i]) die("request");
  }
  long long total = (long long)(rate * duration_ms / 1000.0);
  cs = calloc(nconn, sizeof *cs);
  idle = calloc(nconn, sizeof *idle);
  lat = calloc(total + 1, sizeof *lat);
  const char *trace = getenv("PACED_TRACE");
  if (trace != NULL && *trace) dues = calloc(total + 1, sizeof *dues);
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  for (int i = 0; i < nconn; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(0x7f000001u);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) die("connect");
    cs[i].fd = fd;
    struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (unsigned)i };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
    idle[nidle++] = i;
    alive++;
  }
  struct rusage ru0, ru1;
  getrusage(RUSAGE_SELF, &ru0);
  const double step = 1e9 / rate;
  long long t0 = now_ns();
  long long last_send = t0;
  struct epoll_event evs[256];
  for (;;) {
    long long t = now_ns();
    /* Send everything due, while a connection is free. */
    while (sent < total && nidle > 0) {
      long long due = t0 + (long long)(sent * step);
      if (due > t) break;
      Conn *c = &cs[idle[--nidle]];
      if (c->dead) continue;
      const int r = (int)(sent % nreq);
      c->busy = 1;
      c->due = due;
      if (t - due > 1000000) late++;
      sent++;
      if (send(c->fd, reqs[r], reqlens[r], MSG_NOSIGNAL) != reqlens[r]) {
        /* The connection is gone (or its buffer full, which one request at a time never fills): count it, drop it. */
        errors++;
        drop(c);
        continue;
      }
      last_send = t;
    }
    if (sent >= total && answered + errors >= sent) break;
    if (alive == 0) break;
    if (sent >= total && t - last_send > 10000000000LL) break;
    long long wait = -1;
    if (sent < total && nidle > 0) {
      long long due = t0 + (long long)(sent * step);
      wait = due > t ? due - t : 0;
    } else if (sent >= total) {
      wait = 100000000LL;
    }
    struct timespec ts = { .tv_sec = wait / 1000000000LL, .tv_nsec = wait % 1000000000LL };
    int k = epoll_pwait2(ep, evs, 256, wait < 0 ? NULL : &ts, NULL);
    if (k < 0) { if (errno == EINTR) continue; die("epoll_pwait2"); }
    long long tr = now_ns();
    for (int e = 0; e < k; e++) {
      Conn *c = &cs[evs[e].data.u32];
      ssize_t got = recv(c->fd, buf, sizeof buf, 0);
      if (got <= 0 || !c->busy || consume(c, buf, (int)got, tr) != 0) {
        /* The server closed or answered what was not asked: count it and drop the connection. */
        if (c->busy) errors++;
        drop(c);
      }
    }
  }
  long long t1 = now_ns();
  getrusage(RUSAGE_SELF, &ru1);
  long long cpu = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) * 1000000LL + (ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) +
                  (ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1000000LL + (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec);
  if (dues != NULL) {
    FILE *f = fopen(trace, "a");
    if (f == NULL) die("PACED_TRACE");
    const char *us = getenv("PACED_TRACE_US");
    const long long over = (us != NULL && *us ? atoll(us) : 5000) * 1000LL;
    for (long long i = 0; i < answered; i++) if (lat[i] > over) fprintf(f, "%lld %lld\n", dues[i], lat[i]);
    fclose(f);
  }
  qsort(lat, answered, sizeof *lat, cmp);
  long long p50 = answered ? lat[(answered - 1) * 50 / 100] : 0;
  long long p99 = answered ? lat[(answered - 1) * 99 / 100] : 0;
  long long max = answered ? lat[answered - 1] : 0;
  printf("{\"requests\":%lld,\"answered\":%lld,\"non2xx\":%lld,\"errors\":%lld,\"late\":%lld,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"seconds\":%.3f,\"cpu_us\":%lld}\n",
         sent, answered, non2xx, errors, late, p50 / 1e3, p99 / 1e3, max / 1e3, (t1 - t0) / 1e9, cpu);
  return 0;
}
