/* bench_common.c - the shared parts of the C-driven benchmarks
 * (bench_common.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_die(const char *what, tbrt_link *l)
{
    fprintf(stderr, "tbrt bench: %s: %s\n", what, l ? tbrt_link_why(l) : strerror(errno));
    exit(1);
}

int bench_listen(int *port)
{
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)*port)};
    socklen_t sl = sizeof sa;
    int one = 1;
    if (ls >= 0)
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 128) ||
        getsockname(ls, (struct sockaddr *)&sa, &sl))
        bench_die("listen", NULL);
    *port = ntohs(sa.sin_port);
    return ls;
}

int bench_accept(int ls)
{
    struct pollfd p = {.fd = ls, .events = POLLIN};
    if (poll(&p, 1, (int)(BENCH_TIMEOUT * 1000)) != 1)
        bench_die("accept: no connection", NULL);
    int fd = accept(ls, NULL, NULL);
    if (fd < 0)
        bench_die("accept", NULL);
    return fd;
}

int bench_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa))
        bench_die("connect", NULL);
    return fd;
}

tbrt_link *bench_link(int fd, const char *dev, const char *pers)
{
    tbrt_link_opts o;
    tbrt_link_opts_init(&o);
    o.device = dev;
    o.personality = pers && *pers && strcmp(pers, "-") ? pers : NULL;
    o.timeout = BENCH_TIMEOUT;
    /* TBRT_BENCH_SPIN: busy-poll this long (s) before sleeping, tcp links too */
    const char *spin = getenv("TBRT_BENCH_SPIN");
    if (spin && *spin)
        o.spin = atof(spin);
    uint8_t caps[TBRT_CAPS_SIZE], peer[TBRT_CAPS_SIZE];
    char err[TBRT_WHY_MAX];
    tbrt_link *l;
    if (tbrt_link_probe(fd, &o, &l, caps, err, sizeof err)) {
        fprintf(stderr, "tbrt bench: probe: %s\n", err);
        exit(1);
    }
    /* the socket is the link's now, and non-blocking */
    if (write(fd, caps, sizeof caps) != (ssize_t)sizeof caps)
        bench_die("caps write", NULL);
    size_t got = 0;
    double deadline = bench_now() + BENCH_TIMEOUT;
    while (got < sizeof peer) {
        ssize_t n = read(fd, peer + got, sizeof peer - got);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR) || bench_now() > deadline)
            bench_die("caps read", NULL);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 100);
    }
    if (tbrt_link_activate_wait(l, peer, sizeof peer))
        bench_die("activate", l);
    return l;
}

void bench_flush(tbrt_link *l)
{
    if (tbrt_link_flush_all(l, BENCH_TIMEOUT))
        bench_die("flush", l);
}

void bench_check(const uint8_t *got, const uint8_t *want, size_t off, size_t n, uint64_t idx)
{
    if (memcmp(got, want + off, n) == 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[off + i]) {
            fprintf(stderr, "tbrt bench: message %llu byte %zu is 0x%02x, expected 0x%02x%s\n",
                    (unsigned long long)idx, off + i, got[i], want[off + i],
                    off + i < 8 ? " (its index: lost or repeated?)" : "");
            exit(1);
        }
}

void bench_check_span(const uint8_t *p, size_t off, size_t n, uint64_t idx)
{
    if (bench_pattern_ok(p, off, n, idx))
        return;
    long bad = bench_pattern_bad(p, off, n, idx);
    uint8_t want = bench_pattern_byte((size_t)bad, idx);
    fprintf(stderr, "tbrt bench: message %llu byte %ld is 0x%02x, expected 0x%02x%s\n",
            (unsigned long long)idx, bad, p[(size_t)bad - off], want,
            bad < 8 ? " (its index: lost or repeated?)" : "");
    exit(1);
}

void bench_mem_kib(long *rss, long *vsz)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &pages, &res) != 2)
        pages = res = 0;
    if (f)
        fclose(f);
    long kib = sysconf(_SC_PAGESIZE) / 1024;
    *rss = res * kib;
    *vsz = pages * kib;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
