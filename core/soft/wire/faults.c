/* faults.c - fault injection for the soft device's wires (faults.h): the
 * host-wide port states and the message faults of TBRT_FAULTS.
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
#define FAULT_VERSION 1

struct soft_port_override {
    _Atomic uint32_t state;     /* enum ibv_port_state; 0 = none */
    int32_t pid;
};

struct soft_fault_file {
    uint64_t magic;
    uint32_t version;
    uint32_t pad;
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
    flock(fd, LOCK_EX);
    int rc = 0;
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
    return 0;
}

/* TBRT_FAULTS: "drop=P%,seed=S". The faults issue 10 lists but that need
 * packets are refused by name, so a script written for the UDP wire says
 * what it misses instead of running fault-free. */
static int parse_env(struct soft_faults *f, char *why, size_t len)
{
    const char *env = getenv("TBRT_FAULTS");
    if (!env || !*env)
        return 0;
    char buf[256];
    str_copy(buf, sizeof buf, env);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '='), *end = NULL;
        if (!eq)
            return err_set(why, len, EINVAL, "TBRT_FAULTS \"%s\": \"%s\" is not key=value", env,
                           kv);
        *eq = 0;
        const char *v = eq + 1;
        if (strcmp(kv, "drop") == 0) {
            double p = strtod(v, &end);
            if (end == v || strcmp(end, "%") != 0 || p < 0 || p > 100)
                return err_set(why, len, EINVAL, "TBRT_FAULTS: drop=%s is not a percentage "
                               "0%%..100%% (like drop=1%%)", v);
            f->drop_below = p >= 100 ? UINT64_MAX : (uint64_t)(p / 100.0 * 18446744073709551616.0);
            f->active = p > 0;
        } else if (strcmp(kv, "seed") == 0) {
            f->seed = strtoull(v, &end, 0);
            if (end == v || *end)
                return err_set(why, len, EINVAL, "TBRT_FAULTS: seed=%s is not a number", v);
        } else if (strcmp(kv, "corrupt") == 0 || strcmp(kv, "duplicate") == 0 ||
                   strcmp(kv, "reorder") == 0 || strcmp(kv, "delay") == 0 ||
                   strcmp(kv, "jitter") == 0 || strcmp(kv, "rate") == 0 ||
                   strcmp(kv, "partition") == 0) {
            return err_set(why, len, EOPNOTSUPP, "TBRT_FAULTS: %s is a packet fault, for the "
                           "UDP wire (not in this build); the shared-memory wire has drop=P%%, "
                           "seed=N", kv);
        } else {
            return err_set(why, len, EINVAL, "TBRT_FAULTS: unknown fault \"%s\" (known: "
                           "drop=P%%, seed=N)", kv);
        }
    }
    return 0;
}

int soft_faults_open(struct soft_faults *f, const char *fabric, int dev_index,
                     const uint8_t *port_state, int nports, char *why, size_t len)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->dev_index = dev_index;
    f->pid = (int32_t)getpid();
    f->nports = nports < SOFT_FAULT_PORTS ? nports : SOFT_FAULT_PORTS;
    memcpy(f->port_state, port_state, (size_t)f->nports);
    int rc = parse_env(f, why, len);
    return rc ? rc : map_file(f, fabric, why, len);
}

void soft_faults_close(struct soft_faults *f)
{
    if (f->file)
        munmap(f->file, sizeof *f->file);
    if (f->fd >= 0)
        close(f->fd);
    f->file = NULL;
    f->fd = -1;
}

int soft_faults_port_state(const struct soft_faults *f, int dev, int port)
{
    if (f->file && dev >= 0 && dev < SOFT_FAULT_DEVS && port >= 1 && port <= SOFT_FAULT_PORTS) {
        struct soft_port_override *o = &f->file->ports[dev][port - 1];
        uint32_t st = atomic_load_explicit(&o->state, memory_order_acquire);
        int32_t pid = o->pid;
        /* anyone may write here: only a real state of a live setter */
        if ((st == IBV_PORT_DOWN || st == IBV_PORT_INIT || st == IBV_PORT_ARMED ||
             st == IBV_PORT_ACTIVE) && (pid == f->pid || !pid_dead(pid)))
            return (int)st;
    }
    if (dev == f->dev_index && port >= 1 && port <= f->nports)
        return f->port_state[port - 1];
    return IBV_PORT_ACTIVE;     /* another device's configuration: assume up */
}

void soft_faults_set_port(struct soft_faults *f, int port, int state)
{
    if (!f->file || f->dev_index >= SOFT_FAULT_DEVS || port < 1 || port > SOFT_FAULT_PORTS)
        return;
    struct soft_port_override *o = &f->file->ports[f->dev_index][port - 1];
    o->pid = f->pid;
    atomic_store_explicit(&o->state, (uint32_t)state, memory_order_release);
}

/* splitmix64: a well-mixed 64-bit hash of one word. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

bool soft_faults_decide_drop(const struct soft_faults *f, const struct soft_fault_unit *u)
{
    if (u->qp_type != IBV_QPT_UC && u->qp_type != IBV_QPT_UD)
        return false;           /* RC over shm: reliable (see wire.h) */
    if (f->drop_below == UINT64_MAX)
        return true;
    return mix(f->seed ^ mix(u->index)) < f->drop_below;
}
