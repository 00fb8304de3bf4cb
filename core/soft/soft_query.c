/* soft_query.c - what the soft device says of itself: the device's and a
 * port's attributes (from its personality and port states), its counters
 * (the wire's: packets, retransmits, NAKs, faults injected), a one-line
 * description, and the text of each vendor_err code it gives. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

static const char *counter_names[] = {
    "pkts_sent", "pkts_recv", "bytes_sent", "bytes_recv", "retransmits", "timeouts",
    "naks_sent", "naks_recv", "rnr_naks_sent", "rnr_naks_recv", "duplicates", "out_of_order",
    "drops_injected", "corrupt_injected", "dups_injected", "reordered_injected",
    "delayed_injected", "icrc_failures", "acks_sent", "acks_recv", "credits_sent",
    "credits_recv", "bad_packets", "rnr_resends", "tail_probes", "copies_shared",
    "pieces_helped", "bytes_helped", "sends_refused", "gso_refused", "direct_writes",
};

int soft_counters(tbrt_dev *dev, uint32_t qpn, const char **names, uint64_t *values, int max)
{
    struct soft_dev *sd = soft_of(dev);
    struct soft_wire_stats st;
    memset(&st, 0, sizeof st);
    if (sd->wops->stats)
        sd->wops->stats(sd->wire, qpn, &st);
    if (!qpn)                   /* every drop, of packets (udp) and messages (shm) */
        st.drops_injected = sd->faults.injected[SOFT_FAULT_N_DROP];
    _Static_assert(sizeof st / sizeof(uint64_t) == TBRT_ARRAY_LEN(counter_names),
                   "a name per counter");
    const uint64_t *v = (const uint64_t *)&st;
    int n = 0;
    for (size_t i = 0; i < TBRT_ARRAY_LEN(counter_names) && n < max; i++, n++) {
        names[n] = counter_names[i];
        values[n] = v[i];
    }
    return n;
}

const char *soft_describe(tbrt_dev *dev)
{
    struct soft_dev *sd = soft_of(dev);
    static __thread char buf[800];
    snprintf(buf, sizeof buf, "%s%s%s", sd->describe, sd->faults.nsets ? ", faults " : "",
             sd->faults.nsets ? sd->faults.spec : "");
    return buf;
}

/* ---- queries -------------------------------------------------------------- */

int soft_query_device(tbrt_dev *dev, struct ibv_device_attr *a)
{
    struct soft_dev *sd = soft_of(dev);
    const struct soft_personality *p = sd->p;
    snprintf(a->fw_ver, sizeof a->fw_ver, "tbrt-soft 0.1 %s", p->name);
    a->node_guid = htobe64(0x0254420000000000ull | ((uint64_t)sd->index << 8));
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = p->max_mr;
    a->page_size_cap = 4096;
    a->vendor_id = 0;
    a->vendor_part_id = p->flavor;
    a->hw_ver = 1;
    a->max_qp = p->max_qp;
    a->max_qp_wr = (int)p->max_qp_wr;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
                          IBV_DEVICE_PORT_ACTIVE_EVENT;
    a->max_sge = SOFT_MAX_SGE;
    a->max_sge_rd = SOFT_MAX_SGE;
    a->max_srq = SOFT_MAX_SRQ;
    a->max_srq_wr = (int)p->max_qp_wr;
    a->max_srq_sge = SOFT_MAX_SGE;
    a->max_cq = SOFT_MAX_CQ;
    a->max_cqe = SOFT_MAX_CQE;
    a->max_mr = SOFT_MAX_MR;
    a->max_pd = 1024;
    a->max_qp_rd_atom = 16;
    a->max_qp_init_rd_atom = 16;
    a->max_res_rd_atom = 16 * p->max_qp;
    /* atomics are CPU atomics on the shared mapping: atomic against other
     * RDMA atomics (and, as it happens, against the CPU too) */
    a->atomic_cap = p->qp_types & (1u << IBV_QPT_RC) ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE;
    a->max_ah = 1024;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = (uint8_t)p->nports;
    return 0;
}

int soft_query_port(tbrt_dev *dev, uint8_t port, struct ibv_port_attr *a)
{
    struct soft_dev *sd = soft_of(dev);
    if (port < 1 || port > sd->p->nports)
        return dev_fail(dev, EINVAL, "query_port: port %u does not exist (1..%d)", port,
                        sd->p->nports);
    a->state = soft_port_state(sd, port);
    a->max_mtu = sd->p->mtu;
    a->active_mtu = sd->p->mtu;
    a->gid_tbl_len = sd->p->gid_tbl_len;
    a->port_cap_flags = 0;
    a->max_msg_sz = (uint32_t)TBRT_MIN(sd->p->max_msg, 0xffffffffull);
    a->pkey_tbl_len = 1;
    a->lid = 0;
    a->max_vl_num = 1;
    a->active_width = 2;        /* 4X */
    a->active_speed = 32;       /* EDR-like; cosmetic */
    a->phys_state = a->state == IBV_PORT_ACTIVE ? 5 : 3; /* LinkUp : Disabled */
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

/* ---- protection domains and address handles -------------------------------- */

const char *soft_vendor_err(tbrt_dev *dev, uint32_t code)
{
    struct soft_dev *sd = soft_of(dev);
    switch (code) {
    case SOFT_VERR_FRAMES:
        return "the SEND and its RECV cover different numbers of 4 KiB frames (TN3205: they "
               "must match; post whole strides)";
    case SOFT_VERR_RECV_SHORT: return "the receive buffer is smaller than the message";
    case SOFT_VERR_RNR: return "no receive was posted; RNR retries exhausted";
    case SOFT_VERR_PEER_GONE:
        return "no ACK: the peer queue pair is gone or not in RTR/RTS (retries exhausted)";
    case SOFT_VERR_LKEY: return "bad lkey, or the range is outside its memory region";
    case SOFT_VERR_RKEY: return "bad rkey, range or access rights at the responder";
    case SOFT_VERR_NOT_SHARED:
        return "the receive buffer's memory cannot be shared (not private anonymous memory)";
    case SOFT_VERR_FLUSH: return "flushed: the queue pair is in ERR";
    case SOFT_VERR_MSG_SIZE: return "message larger than the path MTU / max_msg_sz";
    case SOFT_VERR_REMOTE: return "the responder reported an error";
    case SOFT_VERR_PORT_DOWN: return "a port on the path is not ACTIVE (link lost)";
    case SOFT_VERR_ALIGN:
        return "atomic: remote_addr is not 8-byte aligned (IB spec 9.4.5), at the responder";
    case SOFT_VERR_ATOMIC_ACCESS:
        return "atomic: bad rkey or range, or the region lacks IBV_ACCESS_REMOTE_ATOMIC, at "
               "the responder";
    case SOFT_VERR_CORRUPT:
        /* what this process met; a peer that met it in our memory says so */
        return sd->corrupt_why[0] ? sd->corrupt_why
                                  : "a peer found a bad value in the shared memory of this queue "
                                    "pair or its own (corrupt; see the peer's error)";
    default: return "";
    }
}
