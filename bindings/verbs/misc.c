/* misc.c - the rest of the exported ABI: sysfs helpers, the kernel-struct
 * copies librdmacm and providers use, the Ethernet address of a RoCE GID,
 * and the old driver registration entry. None of it reaches the device. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include "verbs_lib.h"

/* The sysfs libibverbs reads: $SYSFS_PATH when not setuid, else /sys. */
const char *ibv_get_sysfs_path(void)
{
    static char path[256];
    const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
    snprintf(path, sizeof path, "%s", env && *env ? env : "/sys");
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = 0;
    return path;
}

/* dir/file into buf, without its trailing newline; its length or -1. The
 * soft devices have no sysfs directory, so for them this finds nothing. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
    char path[512];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size);
    int e = errno;
    close(fd);
    if (n < 0) {
        errno = e;
        return -1;
    }
    if (n > 0 && buf[n - 1] == '\n')
        buf[--n] = 0;
    if ((size_t)n < size)
        buf[n] = 0;
    return (int)n;
}

/* ---- kernel ABI structs to verbs structs --------------------------------------- */

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
    memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof dst->grh.dgid);
    dst->grh.flow_label = src->grh.flow_label;
    dst->grh.sgid_index = src->grh.sgid_index;
    dst->grh.hop_limit = src->grh.hop_limit;
    dst->grh.traffic_class = src->grh.traffic_class;
    dst->dlid = src->dlid;
    dst->sl = src->sl;
    dst->src_path_bits = src->src_path_bits;
    dst->static_rate = src->static_rate;
    dst->is_global = src->is_global;
    dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
    dst->qp_state = src->qp_state;
    dst->cur_qp_state = src->cur_qp_state;
    dst->path_mtu = src->path_mtu;
    dst->path_mig_state = src->path_mig_state;
    dst->qkey = src->qkey;
    dst->rq_psn = src->rq_psn;
    dst->sq_psn = src->sq_psn;
    dst->dest_qp_num = src->dest_qp_num;
    dst->qp_access_flags = src->qp_access_flags;
    dst->cap.max_send_wr = src->max_send_wr;
    dst->cap.max_recv_wr = src->max_recv_wr;
    dst->cap.max_send_sge = src->max_send_sge;
    dst->cap.max_recv_sge = src->max_recv_sge;
    dst->cap.max_inline_data = src->max_inline_data;
    ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
    ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
    dst->pkey_index = src->pkey_index;
    dst->alt_pkey_index = src->alt_pkey_index;
    dst->en_sqd_async_notify = src->en_sqd_async_notify;
    dst->sq_draining = src->sq_draining;
    dst->max_rd_atomic = src->max_rd_atomic;
    dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
    dst->min_rnr_timer = src->min_rnr_timer;
    dst->port_num = src->port_num;
    dst->timeout = src->timeout;
    dst->retry_cnt = src->retry_cnt;
    dst->rnr_retry = src->rnr_retry;
    dst->alt_port_num = src->alt_port_num;
    dst->alt_timeout = src->alt_timeout;
}

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
    memcpy(dst->dgid.raw, src->dgid, sizeof dst->dgid);
    memcpy(dst->sgid.raw, src->sgid, sizeof dst->sgid);
    dst->dlid = src->dlid;
    dst->slid = src->slid;
    dst->raw_traffic = (int)src->raw_traffic;
    dst->flow_label = src->flow_label;
    dst->hop_limit = src->hop_limit;
    dst->traffic_class = src->traffic_class;
    dst->reversible = (int)src->reversible;
    dst->numb_path = src->numb_path;
    dst->pkey = src->pkey;
    dst->sl = src->sl;
    dst->mtu_selector = src->mtu_selector;
    dst->mtu = (uint8_t)src->mtu;
    dst->rate_selector = src->rate_selector;
    dst->rate = src->rate;
    dst->packet_life_time_selector = src->packet_life_time_selector;
    dst->packet_life_time = src->packet_life_time;
    dst->preference = src->preference;
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
    memcpy(dst->dgid, src->dgid.raw, sizeof src->dgid);
    memcpy(dst->sgid, src->sgid.raw, sizeof src->sgid);
    dst->dlid = src->dlid;
    dst->slid = src->slid;
    dst->raw_traffic = (uint32_t)src->raw_traffic;
    dst->flow_label = src->flow_label;
    dst->hop_limit = src->hop_limit;
    dst->traffic_class = src->traffic_class;
    dst->reversible = (uint32_t)src->reversible;
    dst->numb_path = src->numb_path;
    dst->pkey = src->pkey;
    dst->sl = src->sl;
    dst->mtu_selector = src->mtu_selector;
    dst->mtu = src->mtu;
    dst->rate_selector = src->rate_selector;
    dst->rate = src->rate;
    dst->packet_life_time_selector = src->packet_life_time_selector;
    dst->packet_life_time = src->packet_life_time;
    dst->preference = src->preference;
}

/* ---- Ethernet ------------------------------------------------------------------ */

int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
                                uint8_t eth_mac[6], uint16_t *vid)
{
    (void)context, (void)attr, (void)eth_mac, (void)vid;
    return vb_unsupported("ibv_resolve_eth_l2_from_gid", "the soft device's wire is not "
                          "Ethernet: its GIDs have no MAC address or VLAN behind them");
}

#ifndef TBRT_VERBS_APPLE
/* ---- IBVERBS_1.1 ibv_register_driver (compat only) ---------------------------------- */

/* Providers of 2006 registered an init function; this library loads no
 * providers, so a registration is noted (TBRT_DEBUG) and dropped. */
void vb_register_driver_1_1(const char *name, void *init_func);
__asm__(".symver vb_register_driver_1_1, ibv_register_driver@IBVERBS_1.1");
void vb_register_driver_1_1(const char *name, void *init_func)
{
    (void)init_func;
    vb_say("ibv_register_driver", EOPNOTSUPP, "provider \"%s\" ignored: tbrt's libibverbs loads "
           "no providers", name ? name : "?");
}
#endif
