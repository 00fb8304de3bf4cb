/* faults.h - fault injection between the soft device's objects and its
 * wires, in one place (wire.h says how it fits).
 *
 * A device opens its faults with itself; the wire asks them once per unit it
 * moves (a message on shm, a packet on udp) and does what they answer. The
 * fast path is one predictable branch: soft_faults_drop() is inline and
 * says no at once when no fault is set.
 *
 * What exists today:
 *   port states   set at run time (a pulled cable), host-wide per fabric,
 *                 device and port, in a file of the user's private
 *                 directory, held while the setting process lives (a crashed
 *                 fault injector cannot leave a port down for good);
 *   drop          TBRT_FAULTS="drop=P%[,seed=S]": each UC or UD message is
 *                 lost with probability P, decided from S and the message's
 *                 index in its send queue alone, so whichever process
 *                 executes it decides the same, and a run replays exactly
 *                 (queue pair numbers change from run to run).
 * The rest of issue 10's list (corrupt, duplicate, reorder, delay,
 * bandwidth, partition, scopes, counters) comes with the UDP wire; naming
 * one of them now is an error that says so. */
#ifndef TBRT_SOFT_FAULTS_H
#define TBRT_SOFT_FAULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define SOFT_FAULT_DEVS 16      /* soft0..soft15 have port states */
#define SOFT_FAULT_PORTS 2

struct soft_fault_file;         /* the host-wide part (faults.c) */

struct soft_faults {
    int dev_index;
    int32_t pid;
    uint8_t port_state[SOFT_FAULT_PORTS]; /* this device's configured states */
    int nports;
    int fd;
    struct soft_fault_file *file;
    /* message faults of this process */
    bool active;
    uint64_t drop_below;        /* drop when the unit's hash is below this */
    uint64_t seed;
};

/* One unit a wire is about to move. */
struct soft_fault_unit {
    uint32_t qp_type;           /* enum ibv_qp_type of the sender */
    uint64_t index;             /* the message's index in its send queue */
};

/* Open the faults of soft<dev_index> on a fabric ("<name>-<personality>")
 * with its configured port states: 0, or -errno with the reason in why
 * (an unreadable TBRT_FAULTS names what was wrong). */
int soft_faults_open(struct soft_faults *f, const char *fabric, int dev_index,
                     const uint8_t *port_state, int nports, char *why, size_t len);
void soft_faults_close(struct soft_faults *f);

/* The state of a port of soft<dev> now: a run-time state first, then this
 * device's configuration; another device's ports count as ACTIVE. */
int soft_faults_port_state(const struct soft_faults *f, int dev, int port);
/* Set (or, with 0, clear) a run-time state of one of this device's ports. */
void soft_faults_set_port(struct soft_faults *f, int port, int state);

bool soft_faults_decide_drop(const struct soft_faults *f, const struct soft_fault_unit *u);
/* Should this unit be lost? */
static inline bool soft_faults_drop(const struct soft_faults *f, const struct soft_fault_unit *u)
{
    return TBRT_UNLIKELY(f->active) && soft_faults_decide_drop(f, u);
}

#endif
