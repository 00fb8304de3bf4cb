/* cq_ex.c - the extended completion queue's poll API (ibv_start_poll,
 * ibv_next_poll, ibv_end_poll, ibv_wc_read_*), built on the basic poll:
 * start_poll and next_poll each take one completion from the device into
 * the CQ (vb_cq.cur), the read_* calls answer from it. Between start and
 * end the caller owns the CQ, as libibverbs says, so nothing else is held.
 *
 * Timestamps (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP[_WALLCLOCK]) are when
 * the device made the completion (the work finished: tbrt_cq_poll_ts), in
 * nanoseconds of CLOCK_MONOTONIC (hca_core_clock 1,000,000 kHz in
 * ibv_query_device_ex), and the same moment in CLOCK_REALTIME. */
#include <string.h>
#include <time.h>

#include "verbs_lib.h"

static struct vb_cq *cq_of(struct ibv_cq_ex *cq) { return (struct vb_cq *)cq; }

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define VB_TS_FLAGS \
    (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)

static int take(struct vb_cq *q)
{
    uint64_t ts = 0;
    bool want_ts = q->wc_flags & VB_TS_FLAGS;
    int n = vb_poll_one(q, &q->cur, want_ts ? &ts : NULL);
    if (n < 0)
        return -n;
    if (n == 0)
        return ENOENT;
    if (q->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
        q->cur_ts = ts;
    if (q->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) {
        /* the same moment on the wall clock: now, less how long ago it was */
        uint64_t mono = clock_ns(CLOCK_MONOTONIC), wall = clock_ns(CLOCK_REALTIME);
        q->cur_wall_ns = wall - (mono > ts ? mono - ts : 0);
    }
    q->ibv.status = q->cur.status;
    q->ibv.wr_id = q->cur.wr_id;
    return 0;
}

static int start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
    if (attr && attr->comp_mask)
        return EINVAL;
    return take(cq_of(cq));
}

static int next_poll(struct ibv_cq_ex *cq) { return take(cq_of(cq)); }

static void end_poll(struct ibv_cq_ex *cq) { (void)cq; }

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.vendor_err; }
static uint32_t read_byte_len(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.byte_len; }
static __be32 read_imm_data(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.imm_data; }
static uint32_t read_qp_num(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.qp_num; }
static uint32_t read_src_qp(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.src_qp; }
static unsigned int read_wc_flags(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.wc_flags; }
static uint32_t read_slid(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.slid; }
static uint8_t read_sl(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.sl; }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *cq) { return cq_of(cq)->cur.dlid_path_bits; }
static uint64_t read_completion_ts(struct ibv_cq_ex *cq) { return cq_of(cq)->cur_ts; }
static uint64_t read_completion_wallclock_ns(struct ibv_cq_ex *cq)
{
    return cq_of(cq)->cur_wall_ns;
}
/* refused at creation (see VB_CQ_EX_FLAGS); answer nothing if called anyway */
static uint16_t read_cvlan(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static uint32_t read_flow_tag(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static void read_tm_info(struct ibv_cq_ex *cq, struct ibv_wc_tm_info *tm)
{
    (void)cq;
    memset(tm, 0, sizeof *tm);
}

void vb_cq_ex_init(struct vb_cq *q, uint64_t wc_flags)
{
    struct ibv_cq_ex *x = &q->ibv;
    q->is_ex = true;
    q->wc_flags = wc_flags;
    x->start_poll = start_poll;
    x->next_poll = next_poll;
    x->end_poll = end_poll;
    x->read_opcode = read_opcode;
    x->read_vendor_err = read_vendor_err;
    x->read_byte_len = read_byte_len;
    x->read_imm_data = read_imm_data;
    x->read_qp_num = read_qp_num;
    x->read_src_qp = read_src_qp;
    x->read_wc_flags = read_wc_flags;
    x->read_slid = read_slid;
    x->read_sl = read_sl;
    x->read_dlid_path_bits = read_dlid_path_bits;
    x->read_completion_ts = read_completion_ts;
    x->read_completion_wallclock_ns = read_completion_wallclock_ns;
    x->read_cvlan = read_cvlan;
    x->read_flow_tag = read_flow_tag;
    x->read_tm_info = read_tm_info;
}
