/* faults.h - fault injection between the soft device's objects and its
 * wires, in one place (wire.h says how it fits).
 *
 * A device opens its faults with itself; the wire asks them once per unit it
 * moves (a message on shm, a packet on udp) and does what they answer. The
 * fast path is one predictable branch: nothing is asked when no fault is
 * set (f->active).
 *
 * What there is:
 *   port states   set at run time (a pulled cable), host-wide per fabric,
 *                 device and port, in a file of the user's private
 *                 directory, held while the setting process lives (a crashed
 *                 fault injector cannot leave a port down for good);
 *   fault sets    a list of sets, each with a scope (the device or one QP;
 *                 the direction) and a seed, parsed from TBRT_FAULTS when
 *                 the device opens and replaced at run time
 *                 (soft_faults_set: dev:faults{}, link:faults{}):
 *       drop=P%           lose a unit with probability P
 *       drop_every=N      lose every Nth unit
 *       corrupt=P%        flip one bit (the receiver's ICRC check discards it)
 *       duplicate=P%      send it twice
 *       reorder=P%        hold it back behind the next window=N (3) units
 *       delay=T           hold every unit T (units as tc netem: ns, us, ms, s)
 *       jitter=T          plus a random part of up to T, drawn from
 *       distribution=D    uniform (default), normal, pareto, paretonormal
 *       rate=R            a bandwidth cap: bit, kbit, mbit, gbit per second;
 *                         bps, kbps, mbps, gbps are bytes per second (netem's units)
 *       partition=DIR[:T] lose everything going DIR (tx, rx, both) until T has
 *                         passed (it heals), or until cleared without T
 *       seed=S qp=N dir=D the set's seed and scope: dir=tx (what this end
 *                         sends; the default, each end sets its own), rx, both
 *                 Sets are separated by ';'. A set's decisions are a pure
 *                 function of its seed and of the unit's place in the set's
 *                 count, so a run that moves the same units in the same order
 *                 replays exactly. The shm wire (messages, no packets) takes
 *                 drop, drop_every and partition for UC and UD messages,
 *                 decided from the message's index in its send queue so
 *                 either end decides the same (RC over shm stays lossless: a
 *                 reliable transport would retransmit); the other faults
 *                 need packets and are the udp wire's.
 * What was injected is counted in f->injected. */
#ifndef TBRT_SOFT_FAULTS_H
#define TBRT_SOFT_FAULTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define SOFT_FAULT_DEVS 16      /* soft0..soft15 have port states */
#define SOFT_FAULT_PORTS 2
#define SOFT_FAULT_SETS 8

struct soft_fault_file;         /* the host-wide part (faults.c) */

enum soft_fault_dir { SOFT_FAULT_TX = 1, SOFT_FAULT_RX = 2, SOFT_FAULT_BOTH = 3 };
enum soft_fault_dist { SOFT_DIST_UNIFORM, SOFT_DIST_NORMAL, SOFT_DIST_PARETO,
                       SOFT_DIST_PARETONORMAL };

/* One set of faults and its scope. Probabilities are thresholds on a
 * 64-bit hash (0: never; UINT64_MAX: always). */
struct soft_fault_set {
    uint32_t qpn;               /* 0: every QP of the device */
    uint8_t dir;                /* enum soft_fault_dir */
    uint8_t dist;               /* enum soft_fault_dist */
    uint8_t partition;          /* enum soft_fault_dir; 0: none */
    uint64_t drop_below, corrupt_below, dup_below, reorder_below;
    uint32_t drop_every, window;
    uint64_t delay_ns, jitter_ns;
    uint64_t rate_Bps;          /* bytes per second; 0: no cap */
    uint64_t heal_ns;           /* partition: now_ns() when it heals; 0: never */
    uint64_t seed;
    uint64_t count;             /* units this set decided on */
};

/* What the sets decided for one packet. */
struct soft_fault_verdict {
    bool drop, corrupt, duplicate, reorder;
    uint32_t window;            /* reorder: units to let pass first */
    uint64_t delay_ns;          /* hold this long (delay + jitter) */
    uint64_t rate_Bps;          /* pace the direction at this rate (0: no cap) */
    uint64_t corrupt_bit;       /* which bit to flip (modulo the packet's bits) */
};

enum { SOFT_FAULT_N_DROP, SOFT_FAULT_N_CORRUPT, SOFT_FAULT_N_DUP, SOFT_FAULT_N_REORDER,
       SOFT_FAULT_N_DELAY, SOFT_FAULT_N_KINDS };

struct soft_faults {
    int dev_index;
    int32_t pid;
    uint8_t port_state[SOFT_FAULT_PORTS]; /* this device's configured states */
    int nports;
    int fd;
    struct soft_fault_file *file;
    _Atomic uint64_t *port_sets; /* the file's count of port states set, or NULL */
    /* the fault sets of this process's device */
    bool active;                /* any set */
    int nsets;
    struct soft_fault_set sets[SOFT_FAULT_SETS];
    char spec[512];             /* as last set */
    uint64_t injected[SOFT_FAULT_N_KINDS];
};

/* One message the shm wire is about to move. */
struct soft_fault_unit {
    uint32_t qp_type;           /* enum ibv_qp_type of the sender */
    uint32_t qpn;               /* the sender's */
    uint64_t index;             /* the message's index in its send queue */
};

/* Open the faults of soft<dev_index> on a fabric ("<name>-<personality>")
 * with its configured port states and TBRT_FAULTS: 0, or -errno with the
 * reason in why (an unreadable TBRT_FAULTS names what was wrong). */
int soft_faults_open(struct soft_faults *f, const char *fabric, int dev_index,
                     const uint8_t *port_state, int nports, char *why, size_t len);
void soft_faults_close(struct soft_faults *f);

/* The state of a port of soft<dev> now: a run-time state first, then this
 * device's configuration; another device's ports count as ACTIVE. */
int soft_faults_port_state(const struct soft_faults *f, int dev, int port);
/* Set (or, with 0, clear) a run-time state of one of this device's ports. */
void soft_faults_set_port(struct soft_faults *f, int port, int state);

/* A path's two ports, and what was last found for them (zeroed: nothing). */
struct soft_path_memo {
    uint64_t sets;              /* the fabric's port-state sets then, + 1; 0: not kept */
    uint8_t dev_a, port_a, dev_b, port_b;
};
/* Are port_a of soft<dev_a> and port_b of soft<dev_b> both ACTIVE? The
 * answer of two soft_faults_port_state calls; an answer that no run-time
 * state made is kept in *m and given again, without reading the states,
 * until some process of the fabric sets one (a sender asks it per message). */
bool soft_faults_path_lookup(const struct soft_faults *f, struct soft_path_memo *m, int dev_a,
                             int port_a, int dev_b, int port_b);
static inline bool soft_faults_path_up(const struct soft_faults *f, struct soft_path_memo *m,
                                       int dev_a, int port_a, int dev_b, int port_b)
{
    uint64_t sets = f->port_sets ? atomic_load_explicit(f->port_sets, memory_order_acquire) : 0;
    if (TBRT_LIKELY(m->sets == sets + 1 && m->dev_a == dev_a && m->port_a == port_a &&
                    m->dev_b == dev_b && m->port_b == port_b))
        return true;
    return soft_faults_path_lookup(f, m, dev_a, port_a, dev_b, port_b);
}

/* Replace every fault set by those of spec (TBRT_FAULTS's syntax; "" clears
 * them): 0, or -EINVAL with the reason in why (then nothing changed). */
int soft_faults_set(struct soft_faults *f, const char *spec, char *why, size_t len);

bool soft_faults_decide_drop(struct soft_faults *f, const struct soft_fault_unit *u);
/* shm: should this message be lost? */
static inline bool soft_faults_drop(struct soft_faults *f, const struct soft_fault_unit *u)
{
    return TBRT_UNLIKELY(f->active) && soft_faults_decide_drop(f, u);
}

/* Packet wires: the verdict for one packet of QP qpn going in direction
 * dir (SOFT_FAULT_TX: we send it; RX: it arrived); false when nothing is to
 * be done to it. `now` is now_ns(). */
bool soft_faults_packet(struct soft_faults *f, uint32_t qpn, int dir, uint64_t now,
                        struct soft_fault_verdict *v);

#endif
