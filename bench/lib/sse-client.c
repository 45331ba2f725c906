/*
 * The sse-fanout load generator in C (bench/lib/sse-native.ts builds and drives it). Same job
 * as bench/lib/sse-client.ts (raw HTTP/1.1 GETs from loopback sources 127.0.0.2.., status
 * line checked, bytes scanned for `event: done`), at a fraction of its CPU per received event:
 * on loopback the client shares the cores with the server it measures, and Node's per-read
 * callback cost ~8-10 us against ~2-3 us for epoll + recv here.
 *
 * stdin:  "<port> <n> <sources> <concurrency>\n", then n requests, each "<len>\n" + len bytes;
 *         then commands, one a line: "cpu" (answers "cpu <user+sys us>"), "wait <ms>" (answers,
 *         once every open stream saw done or after ms, "done <k> <open>" and then one line of
 *         every stream's done time in request order, CLOCK_MONOTONIC ns, 0 when not seen or not
 *         opened), "close" (exits).
 * stdout: "opened <k> failed <f> <status>=<count>,..." once every stream settled.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

enum { CONNECTING, SENT, OPEN, DONE_OR_CLOSED };

typedef struct {
  int fd;
  int state;
  int status;
  long long done;
  char *req;
  int reqlen;
  char tail[16];
  int taillen;
} Stream;

static const char DONE[] = "event: done";
#define DONE_LEN 11

static Stream *ss;
static int n, port, sources, concurrency;
static int next_i, inflight, settled, opened, failed;
/* Open streams that neither saw done nor closed yet. */
static int waiting;
static int statuses[1000];
static int ep;
static char buf[65536];

static long long now_ns (void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void die (const char *what) { perror(what); exit(2); }

static void settle (Stream *s, int ok) {
  settled++;
  inflight--;
  if (ok) { opened++; waiting++; } else failed++;
  (void)s;
}

static void start (int i) {
  Stream *s = &ss[i];
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) { s->state = DONE_OR_CLOSED; inflight++; settle(s, 0); return; }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
  struct sockaddr_in a = { .sin_family = AF_INET };
  a.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)(2 + i % sources));
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
  struct sockaddr_in d = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
  d.sin_addr.s_addr = htonl(0x7f000001u);
  s->fd = fd;
  s->state = CONNECTING;
  inflight++;
  if (connect(fd, (struct sockaddr *)&d, sizeof d) < 0 && errno != EINPROGRESS) { close(fd); s->state = DONE_OR_CLOSED; settle(s, 0); return; }
  struct epoll_event e = { .events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.u32 = (unsigned)i + 1 };
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0) die("epoll_ctl");
}

static void pump (void) {
  while (inflight < concurrency && next_i < n) start(next_i++);
}

static void finish_stream (Stream *s, int was_open) {
  epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
  close(s->fd);
  s->fd = -1;
  if (!was_open) settle(s, 0);
  else if (!s->done) waiting--;
  s->state = DONE_OR_CLOSED;
}

/* Scans a read for `event: done`, across the previous read's tail too. */
static void scan (Stream *s, const char *p, int len) {
  if (s->done) return;
  if (memmem(p, (size_t)len, DONE, DONE_LEN)) { s->done = now_ns(); waiting--; return; }
  if (s->taillen > 0) {
    char j[32];
    int k = len < DONE_LEN ? len : DONE_LEN;
    memcpy(j, s->tail, (size_t)s->taillen);
    memcpy(j + s->taillen, p, (size_t)k);
    if (memmem(j, (size_t)(s->taillen + k), DONE, DONE_LEN)) { s->done = now_ns(); waiting--; return; }
  }
  int t = len < DONE_LEN - 1 ? len : DONE_LEN - 1;
  memcpy(s->tail, p + len - t, (size_t)t);
  s->taillen = t;
}

static void on_socket (int i, unsigned ev) {
  Stream *s = &ss[i];
  if (s->state == DONE_OR_CLOSED) return;
  if (s->state == CONNECTING) {
    if (ev & (EPOLLERR | EPOLLHUP)) { finish_stream(s, 0); return; }
    if (!(ev & EPOLLOUT)) return;
    ssize_t w = send(s->fd, s->req, (size_t)s->reqlen, MSG_NOSIGNAL);
    if (w != s->reqlen) { finish_stream(s, 0); return; }
    struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP, .data.u32 = (unsigned)i + 1 };
    epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &e);
    s->state = SENT;
    return;
  }
  for (;;) {
    ssize_t r = recv(s->fd, buf, sizeof buf, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) { finish_stream(s, s->state == OPEN); return; }
    if (s->state == SENT) {
      s->status = r >= 12 ? (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0') : -1;
      if (s->status >= 0 && s->status < 1000) statuses[s->status]++;
      if (s->status != 200) { finish_stream(s, 0); return; }
      s->state = OPEN;
      settle(s, 1);
    }
    scan(s, buf, (int)r);
    if ((size_t)r < sizeof buf) return;
  }
}

static long long cpu_us (void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (long long)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000LL + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
}

static void report (void) {
  int k = 0, open = 0;
  for (int i = 0; i < n; i++) if (ss[i].status == 200) { open++; if (ss[i].done) k++; }
  printf("done %d %d\n", k, open);
  for (int i = 0; i < n; i++) printf("%lld ", ss[i].status == 200 ? ss[i].done : 0LL);
  printf("\n");
  fflush(stdout);
}

static char line[256];
static int linelen;

int main (void) {
  const char *nap = getenv("SSE_CLIENT_NAP_US");
  long nap_us = nap ? atol(nap) : 500;
  if (scanf("%d %d %d %d", &port, &n, &sources, &concurrency) != 4 || n <= 0) die("header");
  ss = calloc((size_t)n, sizeof *ss);
  for (int i = 0; i < n; i++) {
    int len;
    if (scanf("%d", &len) != 1) die("request length");
    getchar();
    ss[i].req = malloc((size_t)len);
    if (fread(ss[i].req, 1, (size_t)len, stdin) != (size_t)len) die("request");
    ss[i].reqlen = len;
    ss[i].fd = -1;
  }
  ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event in = { .events = EPOLLIN, .data.u32 = 0 };
  /* Commands are read from fd 0 directly: stdio holds nothing past the last request, since
     nothing more is written until "opened" is answered. */
  if (epoll_ctl(ep, EPOLL_CTL_ADD, 0, &in) < 0) die("epoll stdin");
  pump();
  int announced = 0;
  long long deadline = -1;
  struct epoll_event evs[1024];
  for (;;) {
    int timeout = -1;
    if (deadline >= 0) {
      long long left = (deadline - now_ns()) / 1000000;
      timeout = left < 0 ? 0 : (int)left + 1;
    }
    int k = epoll_wait(ep, evs, 1024, timeout);
    if (k < 0) { if (errno == EINTR) continue; die("epoll_wait"); }
    for (int j = 0; j < k; j++) {
      unsigned id = evs[j].data.u32;
      if (id > 0) { on_socket((int)id - 1, evs[j].events); continue; }
      char c;
      ssize_t r = read(0, &c, 1);
      if (r <= 0) return 0;
      if (c != '\n') { if (linelen < (int)sizeof line - 1) line[linelen++] = c; continue; }
      line[linelen] = 0;
      linelen = 0;
      if (strncmp(line, "cpu", 3) == 0) { printf("cpu %lld\n", cpu_us()); fflush(stdout); }
      else if (strncmp(line, "wait ", 5) == 0) deadline = now_ns() + atoll(line + 5) * 1000000LL;
      else if (strcmp(line, "close") == 0) return 0;
    }
    pump();
    if (!announced && settled == n) {
      announced = 1;
      printf("opened %d failed %d ", opened, failed);
      int first = 1;
      for (int s = 0; s < 1000; s++) if (statuses[s]) { printf("%s%d=%d", first ? "" : ",", s, statuses[s]); first = 0; }
      printf("\n");
      fflush(stdout);
    }
    if (deadline >= 0 && (now_ns() >= deadline || waiting == 0)) { deadline = -1; report(); }
    /* While waiting for done, a short batch is followed by a 0.5 ms nap, so one wake-up reads
       many streams instead of one (a wake-up per stream costs more than the read itself). A
       stream's done time is when it is read: at most ~0.5 ms late, never early. */
    else if (deadline >= 0 && k < 64 && nap_us > 0) {
      struct timespec t = { 0, nap_us * 1000L };
      nanosleep(&t, NULL);
    }
  }
}
