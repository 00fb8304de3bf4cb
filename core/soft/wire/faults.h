/* faults.h - fault injection between the soft device's objects and its
 * wires, in one place (wire.h says how it fits).
 *
 * A device opens its faults with itself; the wire asks them when it moves
 * something.
 *
 * What exists today:
 *   port states   set at run time (a pulled cable), host-wide per fabric,
 *                 device and port, in a file of the user's private
 *                 directory, held while the setting process lives (a crashed
 *                 fault injector cannot leave a port down for good);
 * Message faults (drop, corrupt, duplicate, reorder, delay, ...) come next. */
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
};

/* Open the faults of soft<dev_index> on a fabric ("<name>-<personality>")
 * with its configured port states: 0, or -errno with the reason in why. */
int soft_faults_open(struct soft_faults *f, const char *fabric, int dev_index,
                     const uint8_t *port_state, int nports, char *why, size_t len);
void soft_faults_close(struct soft_faults *f);

/* The state of a port of soft<dev> now: a run-time state first, then this
 * device's configuration; another device's ports count as ACTIVE. */
int soft_faults_port_state(const struct soft_faults *f, int dev, int port);
/* Set (or, with 0, clear) a run-time state of one of this device's ports. */
void soft_faults_set_port(struct soft_faults *f, int port, int state);

#endif
