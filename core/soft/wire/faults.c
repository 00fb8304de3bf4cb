/* faults.c - fault injection for the soft device's wires (faults.h): the
 * host-wide port states and the decisions of the fault sets (their syntax
 * is parsed in faults_parse.c).
 *
 * The port states are a small file beside the fabric registry in the
 * user's private directory (util/private_dir.c: 0700, 0600, no links, owner
 * checked), "<fabric>.faults", so every process on the fabric sees a pulled
 * cable, whichever wire it uses. Any process of the user may write it: a
 * state is used only if it is one, and only while its setter lives. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tbrt.h"
#include "soft/wire/faults.h"
#include "util/private_dir.h"

#define FAULT_MAGIC 0x544c554146545242ull /* "BRTFAULT" */
#define FAULT_VERSION 2

struct soft_port_override {
    _Atomic uint32_t state;     /* enum ibv_port_state; 0 = none */
    int32_t pid;
};

struct soft_fault_file {
    uint64_t magic;
    uint32_t version;
    uint32_t pad;
    /* states set so far, by anyone: bumped after each set, so an answer
     * kept from before (soft_faults_path_up) is known to be old */
    _Atomic uint64_t sets;
    struct soft_port_override ports[SOFT_FAULT_DEVS][SOFT_FAULT_PORTS];
};

static bool pid_dead(int32_t pid)
{
    return pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH);
}

static int map_file(struct soft_faults *f, const char *fabric, char *why, size_t len)
{
    char dir[256], name[128], err[TBRT_WHY_MAX];
    int dfd = private_dir_open(dir, sizeof dir, err, sizeof err);
    if (dfd < 0)
        return err_set(why, len, -dfd, "port states: %s", err);
    snprintf(name, sizeof name, "%s.faults", fabric);
    bool created;
    int fd = private_file_open(dfd, dir, name, &created, err, sizeof err);
    close(dfd);
    if (fd < 0)
        return err_set(why, len, -fd, "port states: %s", err);
    size_t size = sizeof(struct soft_fault_file);
    struct stat st;
    char path[sizeof dir + sizeof name + 2];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = private_file_lock(fd, LOCK_EX, path, err, sizeof err);
    if (rc) {
        close(fd);
        return err_set(why, len, -rc, "port states: %s", err);
    }
    if (fstat(fd, &st) != 0 || ((size_t)st.st_size != size && ftruncate(fd, (off_t)size) != 0))
        rc = err_set(why, len, errno, "port states %s/%s: %s", dir, name, strerror(errno));
    struct soft_fault_file *m = rc ? MAP_FAILED
                                   : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!rc && m == MAP_FAILED)
        rc = err_set(why, len, errno, "map port states %s/%s: %s", dir, name, strerror(errno));
    if (!rc && (m->magic != FAULT_MAGIC || m->version != FAULT_VERSION)) {
        memset(m, 0, size);     /* new, or of another layout: start it over */
        m->magic = FAULT_MAGIC;
        m->version = FAULT_VERSION;
    }
    flock(fd, LOCK_UN);
    if (rc) {
        close(fd);
        return rc;
    }
    f->fd = fd;
    f->file = m;
    f->port_sets = &m->sets;
    return 0;
}

/* parsing: faults_parse.c */

int soft_faults_open(struct soft_faults *f, const char *fabric, int dev_index,
                     const uint8_t *port_state, int nports, char *why, size_t len)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->dev_index = dev_index;
    f->pid = (int32_t)getpid();
    f->nports = nports < SOFT_FAULT_PORTS ? nports : SOFT_FAULT_PORTS;
    memcpy(f->port_state, port_state, (size_t)f->nports);
    const char *env = getenv("TBRT_FAULTS");
    int rc = 0;
    if (env && *env) {
        char err[TBRT_WHY_MAX];
        rc = soft_faults_set(f, env, err, sizeof err);
        if (rc)
            return err_set(why, len, -rc, "TBRT_FAULTS \"%s\": %s", env, err);
    }
    return map_file(f, fabric, why, len);
}

void soft_faults_close(struct soft_faults *f)
{
    if (f->file)
        munmap(f->file, sizeof *f->file);
    if (f->fd >= 0)
        close(f->fd);
    f->file = NULL;
    f->port_sets = NULL;
    f->fd = -1;
}

/* The state of a port; *runtime: a run-time state gave it. */
static int port_state(const struct soft_faults *f, int dev, int port, bool *runtime)
{
    *runtime = false;
    if (f->file && dev >= 0 && dev < SOFT_FAULT_DEVS && port >= 1 && port <= SOFT_FAULT_PORTS) {
        struct soft_port_override *o = &f->file->ports[dev][port - 1];
        uint32_t st = atomic_load_explicit(&o->state, memory_order_acquire);
        int32_t pid = o->pid;
        /* anyone may write here: only a real state of a live setter */
        if ((st == IBV_PORT_DOWN || st == IBV_PORT_INIT || st == IBV_PORT_ARMED ||
             st == IBV_PORT_ACTIVE) && (pid == f->pid || !pid_dead(pid))) {
            *runtime = true;
            return (int)st;
        }
    }
    if (dev == f->dev_index && port >= 1 && port <= f->nports)
        return f->port_state[port - 1];
    return IBV_PORT_ACTIVE;     /* another device's configuration: assume up */
}

int soft_faults_port_state(const struct soft_faults *f, int dev, int port)
{
    bool runtime;
    return port_state(f, dev, port, &runtime);
}

/* Kept only when no run-time state was in force: one that was could end
 * with its setter, which sets nothing. The configuration never changes. */
bool soft_faults_path_lookup(const struct soft_faults *f, struct soft_path_memo *m, int dev_a,
                             int port_a, int dev_b, int port_b)
{
    uint64_t sets = f->file ? atomic_load_explicit(&f->file->sets, memory_order_acquire) : 0;
    bool ra, rb;
    bool up = port_state(f, dev_a, port_a, &ra) == IBV_PORT_ACTIVE &&
              port_state(f, dev_b, port_b, &rb) == IBV_PORT_ACTIVE;
    if (up && !ra && !rb)
        *m = (struct soft_path_memo){.sets = sets + 1, .dev_a = (uint8_t)dev_a,
                                     .port_a = (uint8_t)port_a, .dev_b = (uint8_t)dev_b,
                                     .port_b = (uint8_t)port_b};
    else
        m->sets = 0;
    return up;
}

void soft_faults_set_port(struct soft_faults *f, int port, int state)
{
    if (!f->file || f->dev_index >= SOFT_FAULT_DEVS || port < 1 || port > SOFT_FAULT_PORTS)
        return;
    struct soft_port_override *o = &f->file->ports[f->dev_index][port - 1];
    o->pid = f->pid;
    atomic_store_explicit(&o->state, (uint32_t)state, memory_order_release);
    atomic_fetch_add_explicit(&f->file->sets, 1, memory_order_release);
}

/* splitmix64: a well-mixed 64-bit hash of one word. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The hash of a set's next unit for one kind of decision. */
static uint64_t roll(const struct soft_fault_set *s, uint64_t unit, uint64_t kind)
{
    return mix(s->seed ^ mix(unit * 8 + kind));
}

enum { K_DROP, K_CORRUPT, K_DUP, K_REORDER, K_JITTER, K_JITTER2, K_BIT };

static bool partitioned(struct soft_fault_set *s, int dir, uint64_t now)
{
    if (!(s->partition & dir))
        return false;
    if (s->heal_ns && now >= s->heal_ns) {
        s->partition = 0;       /* healed */
        return false;
    }
    return true;
}

bool soft_faults_decide_drop(struct soft_faults *f, const struct soft_fault_unit *u)
{
    if (u->qp_type != IBV_QPT_UC && u->qp_type != IBV_QPT_UD)
        return false;           /* RC over shm: reliable (see wire.h) */
    uint64_t now = 0;
    for (int i = 0; i < f->nsets; i++) {
        struct soft_fault_set *s = &f->sets[i];
        if (!(s->dir & SOFT_FAULT_TX) || (s->qpn && s->qpn != u->qpn))
            continue;
        if (s->partition && partitioned(s, SOFT_FAULT_TX, now ? now : (now = now_ns())))
            goto drop;
        if (s->drop_every && (u->index + 1) % s->drop_every == 0)
            goto drop;
        if (s->drop_below && (s->drop_below == UINT64_MAX || roll(s, u->index, K_DROP) < s->drop_below))
            goto drop;
    }
    return false;
drop:
    f->injected[SOFT_FAULT_N_DROP]++;
    return true;
}

/* A jitter draw in [0, j) (uniform), or around j/2 for the others
 * (Box-Muller for normal; pareto with shape 3, bounded at 4 j). */
static uint64_t jitter_of(const struct soft_fault_set *s, uint64_t unit)
{
    if (!s->jitter_ns)
        return 0;
    double u1 = (double)(roll(s, unit, K_JITTER) >> 11) / 9007199254740992.0;
    double u2 = (double)(roll(s, unit, K_JITTER2) >> 11) / 9007199254740992.0;
    double j = (double)s->jitter_ns, x;
    switch (s->dist) {
    case SOFT_DIST_NORMAL:
        x = j + j * sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2) / 2.0;
        break;
    case SOFT_DIST_PARETO:
        x = j * (pow(1.0 - u1, -1.0 / 3.0) - 1.0) * 2.0;
        break;
    case SOFT_DIST_PARETONORMAL:
        x = 0.75 * (j + j * sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2) / 2.0) +
            0.25 * j * (pow(1.0 - u2, -1.0 / 3.0) - 1.0) * 2.0;
        break;
    default:
        x = j * u1;
    }
    if (x < 0)
        x = 0;
    if (x > 4 * j)
        x = 4 * j;
    return (uint64_t)x;
}

static bool hit(const struct soft_fault_set *s, uint64_t below, uint64_t unit, uint64_t kind)
{
    return below && (below == UINT64_MAX || roll(s, unit, kind) < below);
}

bool soft_faults_packet(struct soft_faults *f, uint32_t qpn, int dir, uint64_t now,
                        struct soft_fault_verdict *v)
{
    memset(v, 0, sizeof *v);
    bool any = false;
    for (int i = 0; i < f->nsets; i++) {
        struct soft_fault_set *s = &f->sets[i];
        if (!(s->dir & dir) || (s->qpn && s->qpn != qpn))
            continue;
        uint64_t unit = s->count++;
        any = true;
        if ((s->partition && partitioned(s, dir, now)) ||
            (s->drop_every && (unit + 1) % s->drop_every == 0) ||
            hit(s, s->drop_below, unit, K_DROP)) {
            v->drop = true;
            f->injected[SOFT_FAULT_N_DROP]++;
            return true;
        }
        if (hit(s, s->corrupt_below, unit, K_CORRUPT)) {
            v->corrupt = true;
            v->corrupt_bit = roll(s, unit, K_BIT);
            f->injected[SOFT_FAULT_N_CORRUPT]++;
        }
        if (hit(s, s->dup_below, unit, K_DUP)) {
            v->duplicate = true;
            f->injected[SOFT_FAULT_N_DUP]++;
        }
        if (hit(s, s->reorder_below, unit, K_REORDER)) {
            v->reorder = true;
            v->window = s->window ? s->window : 3;
            f->injected[SOFT_FAULT_N_REORDER]++;
        }
        if (s->delay_ns || s->jitter_ns) {
            v->delay_ns += s->delay_ns + jitter_of(s, unit);
            f->injected[SOFT_FAULT_N_DELAY]++;
        }
        if (s->rate_Bps && (!v->rate_Bps || s->rate_Bps < v->rate_Bps))
            v->rate_Bps = s->rate_Bps;
    }
    return any;
}
