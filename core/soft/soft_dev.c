/* soft_dev.c - the soft device as a device kind: listing soft0..N, opening
 * one with its personality (soft_personality.c), port states, faults and
 * wire, PDs, address handles, and the table of operations that ties the
 * soft_*.c files together (what it says of itself: soft_query.c).
 *
 * Configuration, most specific first:
 *   personality  tbrt_dev_opts.personality, $TBRT_SOFT<N>_PERSONALITY,
 *                $TBRT_SOFT_PERSONALITY, else soft0 apple-uc, soft1 linux-rc
 *   ports        tbrt_dev_opts.ports, $TBRT_SOFT<N>_PORTS, $TBRT_SOFT_PORTS,
 *                else the personality's ("down,active" / "active")
 *   devices      $TBRT_SOFT_DEVICES (2); or $TBRT_SOFT_NETDEVS=eth0,eth1: one
 *                per interface, bound to it (soft_netdev.c)
 *   fabric       $TBRT_SOFT_FABRIC ("default"): devices meet only on the same
 *                fabric and personality (a registry each, for shm)
 *   wire         tbrt_dev_opts.wire, $TBRT_SOFT<N>_WIRE, $TBRT_SOFT_WIRE, else
 *                "auto": per queue pair at RTR, shared memory when the peer's
 *                GID is this host's, else UDP (wire/auto.c); "shm", "udp"
 *   UDP port     $TBRT_SOFT_UDP_PORT (4791, RoCEv2's): another gives a fabric
 *                of its own on the same host
 *   capture      tbrt_dev_opts.pcap, $TBRT_PCAP (UDP wire; "%p" = pid)
 *   faults       tbrt_dev_opts.faults, else $TBRT_FAULTS (wire/faults.h);
 *                changed at run time by tbrt_dev_faults */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/util.h"

static int soft_count(void)
{
    int nd = soft_netdev_count();
    if (nd)
        return nd;              /* one per interface */
    long n = env_long("TBRT_SOFT_DEVICES", 2);
    return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}

static const char *config(int index, const char *opt, const char *what, const char *dflt)
{
    if (opt && *opt)
        return opt;
    char name[64];
    snprintf(name, sizeof name, "TBRT_SOFT%d_%s", index, what);
    const char *v = getenv(name);
    if (v && *v)
        return v;
    snprintf(name, sizeof name, "TBRT_SOFT_%s", what);
    v = getenv(name);
    return v && *v ? v : dflt;
}

static const char *default_personality(int index)
{
    return index == 1 ? "linux-rc" : "apple-uc";
}

static int parse_ports(const char *spec, int nports, uint8_t *state, char *err, size_t errlen)
{
    int n = 0;
    const char *p = spec;
    while (*p) {
        size_t len = strcspn(p, ",");
        int st;
        if (len == 4 && strncmp(p, "down", 4) == 0)
            st = IBV_PORT_DOWN;
        else if (len == 6 && strncmp(p, "active", 6) == 0)
            st = IBV_PORT_ACTIVE;
        else if (len == 4 && strncmp(p, "init", 4) == 0)
            st = IBV_PORT_INIT;
        else if (len == 5 && strncmp(p, "armed", 5) == 0)
            st = IBV_PORT_ARMED;
        else
            return err_set(err, errlen, EINVAL, "port state '%.*s' in \"%s\" is not one of "
                           "down, init, armed, active", (int)len, p, spec);
        if (n >= nports)
            return err_set(err, errlen, EINVAL, "\"%s\" gives more than the %d port state%s "
                           "this device has", spec, nports, nports > 1 ? "s" : "");
        state[n++] = (uint8_t)st;
        p += len;
        if (*p == ',')
            p++;
    }
    if (n != nports)
        return err_set(err, errlen, EINVAL, "\"%s\" gives %d port state%s, the device has %d",
                       spec, n, n == 1 ? "" : "s", nports);
    return 0;
}

static int soft_index(const char *name)
{
    if (strncmp(name, "soft", 4) != 0 || !name[4])
        return -1;
    char *end;
    long i = strtol(name + 4, &end, 10);
    return *end || i < 0 ? -1 : (int)i;
}

/* ---- listing and opening ------------------------------------------------ */

static int soft_list(tbrt_devinfo *out, int max)
{
    int n = soft_count();
    const char *shm_why = access("/dev/shm", W_OK) == 0 ? NULL
                                                        : "/dev/shm is not writable (the fabric "
                                                          "registry lives there)";
    for (int i = 0; i < n && i < max; i++) {
        tbrt_devinfo *d = &out[i];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "soft%d", i);
        str_copy(d->kind, sizeof d->kind, "soft");
        const char *pname = config(i, NULL, "PERSONALITY", default_personality(i));
        const struct soft_personality *p = soft_personality_find(pname);
        str_copy(d->personality, sizeof d->personality, pname);
        d->flavor = p ? p->flavor : 0;
        d->usable = p && !shm_why;
        if (!p)
            snprintf(d->why, sizeof d->why, "personality \"%s\" is not one of %s", pname,
                     soft_personality_names());
        else if (shm_why)
            str_copy(d->why, sizeof d->why, shm_why);
        char nd[32], buf[TBRT_WHY_MAX];
        const char *nwhy;
        if (d->usable && soft_netdev_name(i, nd, sizeof nd) &&
            (nwhy = soft_netdev_why(nd, buf, sizeof buf)) != NULL) {
            d->usable = false;
            str_copy(d->why, sizeof d->why, nwhy);
        }
    }
    return n;
}

/* The fabric's name: soft devices meet only on the same fabric (default
 * "default"; TBRT_SOFT_FABRIC gives a separate one, e.g. per test run) and
 * personality, so apple-uc and linux-rc queue pairs never meet. */
static int fabric_name(struct soft_dev *sd, char *out, size_t len)
{
    const char *n = env_str("TBRT_SOFT_FABRIC", "default");
    size_t k = strlen(n);
    if (k == 0 || k > 32 || strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789._-") != k || n[0] == '.')
        return dev_fail(&sd->dev, EINVAL, "TBRT_SOFT_FABRIC \"%s\": a fabric name is 1..32 of "
                        "A-Z a-z 0-9 . _ - (not starting with .)", n);
    snprintf(out, len, "%s-%s", n, sd->p->name);
    return 0;
}

/* Faults a wire without packets cannot inject. */
static const char *packet_fault(const struct soft_faults *f)
{
    for (int i = 0; i < f->nsets; i++) {
        const struct soft_fault_set *s = &f->sets[i];
        if (s->corrupt_below)
            return "corrupt";
        if (s->dup_below)
            return "duplicate";
        if (s->reorder_below)
            return "reorder";
        if (s->delay_ns)
            return "delay";
        if (s->jitter_ns)
            return "jitter";
        if (s->rate_Bps)
            return "rate";
    }
    return NULL;
}

static int check_faults_fit(struct soft_dev *sd)
{
    const char *pf = sd->wops == &soft_wire_shm ? packet_fault(&sd->faults) : NULL;
    if (pf)
        return dev_fail(&sd->dev, EOPNOTSUPP, "faults: %s is a packet fault, for the UDP wire "
                        "(TBRT_SOFT_WIRE=udp or auto); the shared-memory wire has drop=P%%, "
                        "drop_every=N, partition", pf);
    return 0;
}

static int udp_port_of(struct soft_dev *sd, uint16_t *port)
{
    long v = env_long("TBRT_SOFT_UDP_PORT", 4791);
    if (v < 1 || v > 65535)
        return dev_fail(&sd->dev, EINVAL, "TBRT_SOFT_UDP_PORT %ld is not a UDP port (1..65535)",
                        v);
    *port = (uint16_t)v;
    return 0;
}

/* Faults and the wire for an opened device. */
static int soft_attach(struct soft_dev *sd, const tbrt_dev_opts *opts)
{
    char fabric[64], why[TBRT_WHY_MAX];
    int rc = fabric_name(sd, fabric, sizeof fabric);
    if (rc)
        return rc;
    rc = soft_faults_open(&sd->faults, fabric, sd->index, sd->port_state, sd->p->nports, why,
                          sizeof why);
    if (rc)
        return dev_fail(&sd->dev, -rc, "%s", why);
    sd->faults_open = true;
    if (opts->faults && (rc = soft_faults_set(&sd->faults, opts->faults, why, sizeof why)))
        return dev_fail(&sd->dev, -rc, "faults \"%s\": %s", opts->faults, why);
    const char *wire = config(sd->index, opts->wire, "WIRE", "auto");
    if (strcmp(wire, "shm") == 0)
        sd->wops = &soft_wire_shm;
    else if (strcmp(wire, "udp") == 0)
        sd->wops = &soft_wire_udp;
    else if (strcmp(wire, "auto") == 0)
        sd->wops = &soft_wire_auto;
    else
        return dev_fail(&sd->dev, EINVAL, "wire \"%s\" is not one of auto, shm, udp", wire);
    if ((rc = check_faults_fit(sd)))
        return rc;
    uint16_t port = 4791;
    if ((rc = udp_port_of(sd, &port)))
        return rc;
    const char *pcap = opts->pcap && *opts->pcap ? opts->pcap : getenv("TBRT_PCAP");
    struct soft_wire_cfg cfg = {
        .fabric = fabric, .dev_index = sd->index, .credit_flow = sd->p->credit_flow,
        .frames_must_match = sd->p->frames_must_match, .faults = &sd->faults,
        .corrupt_why = sd->corrupt_why, .corrupt_len = sizeof sd->corrupt_why, .udp_port = port,
        .pcap = pcap && *pcap ? pcap : NULL, .netdev = sd->netdev[0] ? sd->netdev : NULL,
    };
    rc = sd->wops->open(&cfg, &sd->wire, why, sizeof why);
    if (rc)
        return dev_fail(&sd->dev, -rc, "%s wire: %s", sd->wops->name, why);
    if (sd->wops == &soft_wire_shm)
        snprintf(sd->describe, sizeof sd->describe, "shm (shared memory, this host)");
    else if (sd->wops == &soft_wire_udp)
        snprintf(sd->describe, sizeof sd->describe, "udp (RoCEv2 over UDP port %u)", port);
    else
        snprintf(sd->describe, sizeof sd->describe, "auto (shared memory on this host, RoCEv2 "
                 "over UDP port %u elsewhere)", port);
    if (sd->netdev[0])
        str_append(sd->describe, sizeof sd->describe, ", bound to %s", sd->netdev);
    if (cfg.pcap)
        str_append(sd->describe, sizeof sd->describe, ", capture %s", cfg.pcap);
    return 0;
}

static void soft_close(tbrt_dev *dev);

static int soft_open(const char *name, const tbrt_dev_opts *opts, tbrt_dev **out, char *err,
                     size_t errlen)
{
    int index = soft_index(name);
    if (index < 0 || index >= soft_count())
        return err_set(err, errlen, ENODEV, "%s: no such soft device (soft0..soft%d; "
                       "TBRT_SOFT_DEVICES sets how many)", name, soft_count() - 1);
    const char *pname = config(index, opts->personality, "PERSONALITY", default_personality(index));
    const struct soft_personality *p = soft_personality_find(pname);
    if (!p)
        return err_set(err, errlen, EINVAL, "%s: personality \"%s\" is not one of %s", name, pname,
                       soft_personality_names());
    struct soft_dev *sd = calloc(1, sizeof *sd);
    if (!sd)
        return err_set(err, errlen, ENOMEM, "%s: out of memory", name);
    dev_init(&sd->dev, &tbrt_soft_ops, name, p->name, p->flavor);
    sd->dev.ordered_writes = true;  /* both wires place a WRITE with placed_copy */
    sd->p = p;
    sd->index = index;
    char nbuf[TBRT_WHY_MAX];
    const char *nwhy;
    if (soft_netdev_name(index, sd->netdev, sizeof sd->netdev) &&
        (nwhy = soft_netdev_why(sd->netdev, nbuf, sizeof nbuf)) != NULL) {
        err_set(err, errlen, ENODEV, "%s: %s", name, nwhy);
        free(sd);
        return -ENODEV;
    }
    sd->ev.epfd = sd->ev.efd = -1;
    const char *ports = config(index, opts->ports, "PORTS", p->ports);
    int rc = parse_ports(ports, p->nports, sd->port_state, err, errlen);
    if (rc == 0)
        rc = soft_attach(sd, opts);
    if (rc == 0)
        rc = soft_events_open(sd);
    if (rc) {
        if (sd->dev.why[0])
            err_set(err, errlen, -rc, "%s", sd->dev.why);
        else if (err && strncmp(err, name, strlen(name)) != 0) {
            char tmp[TBRT_WHY_MAX];
            str_copy(tmp, sizeof tmp, err);
            err_set(err, errlen, -rc, "%s: %s", name, tmp);
        }
        soft_close(&sd->dev);
        return rc;
    }
    soft_gid_build(sd);
    *out = &sd->dev;
    return 0;
}

static void soft_close(tbrt_dev *dev)
{
    struct soft_dev *sd = soft_of(dev);
    /* whatever the caller left behind, in the order hardware needs */
    while (sd->qps)
        soft_destroy_qp(&sd->qps->qp);
    while (sd->srqs)
        soft_destroy_srq(&sd->srqs->srq);
    while (sd->cqs)
        soft_destroy_cq(&sd->cqs->cq);
    while (sd->mrs) {
        struct soft_mr *m = sd->mrs;
        sd->mrs = m->next;
        if (sd->wire)
            sd->wops->mr_dereg(sd->wire, m->mr.lkey);
        free(m);
    }
    soft_events_close(sd);
    if (sd->wire)
        sd->wops->close(sd->wire);
    if (sd->faults_open)
        soft_faults_close(&sd->faults);
    free(sd);
}

int soft_port_state(struct soft_dev *sd, int port)
{
    if (TBRT_UNLIKELY(sd->netdev[0]))
        return soft_netdev_port_state(sd, port);
    return soft_faults_port_state(&sd->faults, sd->index, port);
}

int soft_set_port_state(tbrt_dev *dev, uint8_t port, int state)
{
    struct soft_dev *sd = soft_of(dev);
    if (port < 1 || port > sd->p->nports)
        return dev_fail(dev, EINVAL, "set_port_state: port %u does not exist (1..%d)", port,
                        sd->p->nports);
    if (state != 0 && state != IBV_PORT_DOWN && state != IBV_PORT_ACTIVE &&
        state != IBV_PORT_INIT && state != IBV_PORT_ARMED)
        return dev_fail(dev, EINVAL, "set_port_state: %d is not a port state", state);
    if (sd->index >= SOFT_FAULT_DEVS)
        return dev_fail(dev, EINVAL, "set_port_state: only soft0..soft%d", SOFT_FAULT_DEVS - 1);
    soft_faults_set_port(&sd->faults, port, state);
    /* every device of the host that sees this port hears of it (our own too) */
    if (sd->wops->ports_changed)
        sd->wops->ports_changed(sd->wire);
    return 0;
}

/* ---- faults and counters ------------------------------------------------------ */

static int soft_set_faults(tbrt_dev *dev, const char *spec)
{
    struct soft_dev *sd = soft_of(dev);
    struct soft_faults old = sd->faults;
    char why[TBRT_WHY_MAX];
    int rc = soft_faults_set(&sd->faults, spec, why, sizeof why);
    if (rc)
        return dev_fail(dev, -rc, "faults \"%s\": %s", spec, why);
    if ((rc = check_faults_fit(sd))) {
        memcpy(sd->faults.sets, old.sets, sizeof old.sets);
        sd->faults.nsets = old.nsets;
        sd->faults.active = old.active;
        memcpy(sd->faults.spec, old.spec, sizeof old.spec);
        return rc;
    }
    return 0;
}

static int soft_alloc_pd(tbrt_dev *dev, tbrt_pd **out)
{
    struct soft_pd *pd = calloc(1, sizeof *pd);
    if (!pd)
        return dev_fail(dev, ENOMEM, "alloc_pd: out of memory");
    pd->pd = (tbrt_pd){.dev = dev, .handle = ++soft_of(dev)->next_handle};
    *out = &pd->pd;
    return 0;
}

static int soft_dealloc_pd(tbrt_pd *pd)
{
    struct soft_dev *sd = soft_of(pd->dev);
    for (struct soft_qp *q = sd->qps; q; q = q->next)
        if (q->qp.pd == pd)
            return dev_fail(pd->dev, EBUSY, "dealloc_pd: QP 0x%x still uses it", q->qp.qp_num);
    free(pd);
    return 0;
}

static int soft_create_ah(tbrt_pd *pd, struct ibv_ah_attr *attr, tbrt_ah **out)
{
    struct soft_dev *sd = soft_of(pd->dev);
    if (attr->port_num < 1 || attr->port_num > sd->p->nports)
        return dev_fail(pd->dev, EINVAL, "create_ah: port %u does not exist", attr->port_num);
    if (!attr->is_global)
        return dev_fail(pd->dev, EINVAL, "create_ah: RoCE needs a GRH (is_global = 1)");
    struct ibv_gid_entry e;
    if (soft_query_gid(pd->dev, attr->port_num, attr->grh.sgid_index, &e) < 0)
        return dev_fail(pd->dev, EINVAL, "create_ah: sgid_index %u is empty",
                        attr->grh.sgid_index);
    struct soft_ah *ah = calloc(1, sizeof *ah);
    if (!ah)
        return dev_fail(pd->dev, ENOMEM, "create_ah: out of memory");
    ah->ah = (tbrt_ah){.dev = pd->dev, .pd = pd, .attr = *attr};
    *out = &ah->ah;
    return 0;
}

static int soft_destroy_ah(tbrt_ah *ah)
{
    free(ah);
    return 0;
}

const struct tbrt_dev_ops tbrt_soft_ops = {
    .kind = "soft",
    .list = soft_list,
    .open = soft_open,
    .close = soft_close,
    .query_device = soft_query_device,
    .query_port = soft_query_port,
    .query_gid = soft_query_gid,
    .alloc_pd = soft_alloc_pd,
    .dealloc_pd = soft_dealloc_pd,
    .create_cq = soft_create_cq,
    .destroy_cq = soft_destroy_cq,
    .poll_cq = soft_poll_cq,
    .poll_cq_ts = soft_poll_cq_ts,
    .req_notify_cq = soft_req_notify_cq,
    .ack_cq_events = soft_ack_cq_events,
    .create_qp = soft_create_qp,
    .modify_qp = soft_modify_qp,
    .destroy_qp = soft_destroy_qp,
    .reg_mr = soft_reg_mr,
    .reg_mr_iova = soft_reg_mr_iova,
    .dereg_mr = soft_dereg_mr,
    .create_ah = soft_create_ah,
    .destroy_ah = soft_destroy_ah,
    .post_send = soft_post_send,
    .post_recv = soft_post_recv,
    .create_srq = soft_create_srq,
    .modify_srq = soft_modify_srq,
    .query_srq = soft_query_srq,
    .destroy_srq = soft_destroy_srq,
    .post_srq_recv = soft_post_srq_recv,
    .event_fd = soft_event_fd,
    .get_event = soft_get_event,
    .vendor_err = soft_vendor_err,
    .set_port_state = soft_set_port_state,
    .set_faults = soft_set_faults,
    .counters = soft_counters,
    .describe = soft_describe,
    .qp_peer = soft_qp_peer,
};
