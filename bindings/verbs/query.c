/* query.c - what a context says about itself: device attributes (basic and
 * extended), ports (the exported pre-extension call and the verbs_context
 * one verbs.h inlines), GIDs (untyped, typed, the whole table, the private
 * type query perftest and ibv_devinfo use), P_Keys and the clock.
 *
 * GID types: the soft device's Linux personality types its entries (RoCE v1
 * and v2, like mlx5); the Apple flavor has no typed queries at all, as
 * Apple's librdma has none, so its library does not export them. */
#include <string.h>
#include <time.h>

#include "verbs_lib.h"

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
    VB_INJECT_INT("ibv_query_device");
    struct vb_ctx *c = vb_ctx_of(context);
    vb_lock(c);
    int rc = tbrt_dev_query(c->dev, attr);
    int err = rc ? vb_failed("ibv_query_device", rc, c->dev) : 0;
    vb_unlock(c);
    return err;
}

/* The extended attributes: what the soft device has beyond the basic
 * ones is nothing (no ODP, TSO, RSS, tag matching, device memory...),
 * except the completion clock the binding stamps extended CQs with (see
 * cq_ex.c): nanoseconds, so 1,000,000 kHz. */
int vb_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *in,
                       struct ibv_device_attr_ex *attr, size_t attr_size)
{
    if (in && in->comp_mask)
        return EINVAL;
    if (attr_size < sizeof attr->orig_attr)
        return EINVAL;
    struct ibv_device_attr_ex a;
    memset(&a, 0, sizeof a);
    int err = ibv_query_device(context, &a.orig_attr);
    if (err)
        return err;
    a.completion_timestamp_mask = UINT64_MAX;
    a.hca_core_clock = 1000000;
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
    a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
    memcpy(attr, &a, attr_size < sizeof a ? attr_size : sizeof a);
    return 0;
}

static int port_attr(struct ibv_context *context, uint8_t port, struct ibv_port_attr *a)
{
    struct vb_ctx *c = vb_ctx_of(context);
    vb_lock(c);
    int rc = tbrt_port_query(c->dev, port, a);
    int err = rc ? vb_failed("ibv_query_port", rc, c->dev) : 0;
    vb_unlock(c);
    return err;
}

/* verbs_context.query_port: what verbs.h's inline ibv_query_port calls */
int vb_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr,
                  size_t len)
{
    VB_INJECT_INT("ibv_query_port");
    vb_trace("verbs_context.query_port");
    struct ibv_port_attr a;
    int err = port_attr(context, port, &a);
    if (!err)
        memcpy(attr, &a, len < sizeof a ? len : sizeof a);
    return err;
}

/* The exported call is the pre-extension one: the caller's struct ends at
 * `flags` (verbs.h's _compat_ibv_port_attr), so only that much is written. */
int ibv_query_port(struct ibv_context *context, uint8_t port, struct _compat_ibv_port_attr *attr)
{
    VB_INJECT_INT("ibv_query_port");
    vb_trace("ibv_query_port");
    struct ibv_port_attr a;
    int err = port_attr(context, port, &a);
    if (!err)
        memcpy(attr, &a, offsetof(struct ibv_port_attr, flags) + sizeof a.flags);
    return err;
}

/* One entry: 0 typed, 1 untyped, -ENODATA empty, or -errno (said). */
static int gid_entry(struct ibv_context *context, uint32_t port, uint32_t index,
                     struct ibv_gid_entry *e, const char *call)
{
    if (port > 255 || index > 0x7fffffff) {
        vb_say(call, EINVAL, "port %u / index %u out of range", port, index);
        return -EINVAL;
    }
    struct vb_ctx *c = vb_ctx_of(context);
    vb_lock(c);
    int rc = tbrt_gid_query(c->dev, (uint8_t)port, (int)index, e);
    if (rc < 0 && rc != -ENODATA)
        vb_failed(call, rc, c->dev);
    vb_unlock(c);
    return rc;
}

/* As rdma-core: 0, or -1 with errno; an empty entry reads as a zero GID. */
int ibv_query_gid(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid)
{
    int inj = vb_inject("ibv_query_gid");
    if (inj) {
        errno = inj < 0 ? -inj : inj;
        return -1;
    }
    if (index < 0) {
        errno = EINVAL;
        return -1;
    }
    struct ibv_gid_entry e;
    int rc = gid_entry(context, port, (uint32_t)index, &e, "ibv_query_gid");
    if (rc == -ENODATA) {
        memset(gid, 0, sizeof *gid);
        return 0;
    }
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    *gid = e.gid;
    return 0;
}

#ifndef TBRT_VERBS_APPLE
/* As rdma-core: 0 or an errno; ENODATA for an empty entry. */
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port, uint32_t index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
    VB_INJECT_INT("_ibv_query_gid_ex");
    if (flags || entry_size < sizeof *entry)
        return EINVAL;
    int rc = gid_entry(context, port, index, entry, "_ibv_query_gid_ex");
    return rc < 0 ? -rc : 0;
}

/* Every non-empty entry of every port, entry_size apart; their number or
 * a negative errno. */
ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
                             size_t max_entries, uint32_t flags, size_t entry_size)
{
    if (flags || entry_size < sizeof *entries)
        return -EINVAL;
    struct vb_ctx *c = vb_ctx_of(context);
    size_t n = 0;
    for (uint8_t port = 1; port <= c->attr.phys_port_cnt; port++) {
        struct ibv_port_attr pa;
        int err = port_attr(context, port, &pa);
        if (err)
            return -err;
        for (int i = 0; i < pa.gid_tbl_len; i++) {
            struct ibv_gid_entry e;
            int rc = gid_entry(context, port, (uint32_t)i, &e, "ibv_query_gid_table");
            if (rc == -ENODATA)
                continue;
            if (rc < 0)
                return rc;
            if (n >= max_entries)
                return -EINVAL;  /* the table does not fit, as rdma-core says */
            memcpy((char *)entries + n * entry_size, &e, sizeof e);
            n++;
        }
    }
    return (ssize_t)n;
}

/* rdma-core's private query (IBVERBS_PRIVATE_34), which perftest and
 * ibv_devinfo import: 0 for IB/RoCE v1, 1 for RoCE v2; an empty entry is v1. */
enum vb_gid_type_sysfs { VB_GID_SYSFS_IB_ROCE_V1 = 0, VB_GID_SYSFS_ROCE_V2 = 1 };

int ibv_query_gid_type(struct ibv_context *context, uint8_t port, unsigned int index,
                       enum vb_gid_type_sysfs *type)
{
    struct ibv_gid_entry e;
    int rc = gid_entry(context, port, index, &e, "ibv_query_gid_type");
    if (rc == -ENODATA) {
        *type = VB_GID_SYSFS_IB_ROCE_V1;
        return 0;
    }
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    *type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? VB_GID_SYSFS_ROCE_V2 : VB_GID_SYSFS_IB_ROCE_V1;
    return 0;
}
#endif

/* The P_Key table is the default full-member key, once per port: what a
 * RoCE port has (the soft device refuses any pkey_index but 0). */
#define VB_DEFAULT_PKEY 0xffff

int ibv_query_pkey(struct ibv_context *context, uint8_t port, int index, __be16 *pkey)
{
    struct ibv_port_attr pa;
    int err = port_attr(context, port, &pa);
    if (err) {
        errno = err;
        return -1;
    }
    if (index < 0 || index >= pa.pkey_tbl_len) {
        vb_say("ibv_query_pkey", EINVAL, "index %d outside the %u-entry P_Key table", index,
               pa.pkey_tbl_len);
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(VB_DEFAULT_PKEY);
    return 0;
}

int ibv_get_pkey_index(struct ibv_context *context, uint8_t port, __be16 pkey)
{
    for (int i = 0;; i++) {
        __be16 p;
        if (ibv_query_pkey(context, port, i, &p) < 0)
            return -1;
        if (p == pkey)
            return i;
    }
}

/* The clock extended CQs are stamped with (CLOCK_MONOTONIC, ns). */
int vb_query_rt_values(struct ibv_context *context, struct ibv_values_ex *values)
{
    (void)context;
    uint32_t want = values->comp_mask;
    values->comp_mask = 0;
    if (want & IBV_VALUES_MASK_RAW_CLOCK) {
        clock_gettime(CLOCK_MONOTONIC, &values->raw_clock);
        values->comp_mask |= IBV_VALUES_MASK_RAW_CLOCK;
    }
    return 0;
}
