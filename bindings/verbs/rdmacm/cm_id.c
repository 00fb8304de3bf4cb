/* cm_id.c - ids and their addresses: the device table (rdma_get_devices),
 * creating and destroying ids, binding and resolving addresses to a
 * device, port and GID, the route, options, and the QPs rdma-cm makes on
 * an id (rdma_create_qp, with the CQs it makes when the caller gives none)
 * and the attributes it moves them through (rdma_init_qp_attr). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cm.h"

/* How long rdma_destroy_id waits for the caller to ack the id's events. */
#define CM_ACK_WAIT_S 5
/* RoCE defaults of the kernel's CM (as rdma_init_qp_attr reports them) */
#define CM_MIN_RNR_TIMER 12
#define CM_ACK_TIMEOUT 14
#define CM_HOP_LIMIT 64
#define CM_DEFAULT_PKEY 0xffff

/* ---- devices ---------------------------------------------------------------------- */

static struct cm_dev *devs;
static int ndevs = -1;

/* Every device, opened once for the life of the process (cm_lock held). */
struct cm_dev *cm_devs(int *n)
{
    if (ndevs < 0) {
        ndevs = 0;
        int count = 0;
        struct ibv_device **list = ibv_get_device_list(&count);
        if (list && count > 0 && (devs = calloc((size_t)count, sizeof *devs))) {
            for (int i = 0; i < count; i++) {
                struct ibv_context *ctx = ibv_open_device(list[i]);
                struct ibv_device_attr a;
                if (!ctx)
                    continue;
                if (ibv_query_device(ctx, &a)) {
                    ibv_close_device(ctx);
                    continue;
                }
                devs[ndevs].ctx = ctx;
                devs[ndevs].nports = a.phys_port_cnt;
                ndevs++;
            }
        }
        if (list)
            ibv_free_device_list(list);
    }
    *n = ndevs;
    return devs;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
    pthread_mutex_lock(&cm_lock);
    int n;
    struct cm_dev *d = cm_devs(&n);
    struct ibv_context **list = calloc((size_t)n + 1, sizeof *list);
    for (int i = 0; list && i < n; i++)
        list[i] = d[i].ctx;
    pthread_mutex_unlock(&cm_lock);
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    if (num_devices)
        *num_devices = n;
    return list;
}

void rdma_free_devices(struct ibv_context **list) { free(list); }

/* ---- the list of ids (for the service thread and teardown) --------------------------- */

static struct cm_id *all_ids;

void cm_unlink(struct cm_id *id)
{
    for (struct cm_id **pp = &all_ids; *pp; pp = &(*pp)->next_all)
        if (*pp == id) {
            *pp = id->next_all;
            return;
        }
}

struct cm_id *cm_first_id(void) { return all_ids; }

/* ---- create and destroy --------------------------------------------------------------- */

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **out, void *context,
                   enum rdma_port_space ps)
{
    if (!out)
        return cm_fail("rdma_create_id", EINVAL, "no id pointer");
    if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB && ps != RDMA_PS_IB)
        return cm_fail("rdma_create_id", EINVAL, "port space 0x%x", ps);
    struct cm_id *id = calloc(1, sizeof *id);
    if (!id)
        return cm_fail("rdma_create_id", ENOMEM, "out of memory");
    struct cm_chan *ch = channel ? (struct cm_chan *)channel : cm_chan_new(true);
    if (!ch) {
        free(id);
        return cm_fail("rdma_create_id", ENOMEM, "no channel for a synchronous id");
    }
    id->chan = ch;
    id->sock = -1;
    id->gid_index = -1;
    id->pub.channel = &ch->pub;
    id->pub.context = context;
    id->pub.ps = ps;
    id->pub.qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (uint32_t)time(NULL) * 2654435761u;
    id->psn = r & 0xffffff;
    pthread_mutex_lock(&cm_lock);
    cm_link(id);
    pthread_mutex_unlock(&cm_lock);
    *out = &id->pub;
    return 0;
}

static uint64_t next_serial;

void cm_link(struct cm_id *id)
{
    id->serial = ++next_serial;
    id->next_all = all_ids;
    all_ids = id;
}

/* cm_lock held */
void cm_free_id(struct cm_id *id)
{
    cm_service_forget(id);
    if (id->sock >= 0)
        close(id->sock);
    cm_unlink(id);
    if (id->chan->sync)
        cm_chan_free(id->chan);
    free(id->pub.route.path_rec == &id->path ? NULL : id->pub.route.path_rec);
    free(id);
}

int rdma_destroy_id(struct rdma_cm_id *rid)
{
    if (!rid)
        return cm_fail("rdma_destroy_id", EINVAL, "no id");
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    id->destroying = true;
    if (id->pub.event) {            /* a synchronous id's kept request */
        struct rdma_cm_event *e = id->pub.event;
        id->pub.event = NULL;
        pthread_mutex_unlock(&cm_lock);
        rdma_ack_cm_event(e);
        pthread_mutex_lock(&cm_lock);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += CM_ACK_WAIT_S;
    int rc = 0;
    /* events of a synchronous id's private channel go with it */
    while (id->events_out > 0 && !id->chan->sync && rc == 0)
        rc = pthread_cond_timedwait(&cm_cond, &cm_lock, &until);
    if (id->events_out > 0 && !id->chan->sync) {
        int n = id->events_out;
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_destroy_id", EBUSY, "%d event%s of the id never acked "
                       "(rdma_ack_cm_event) within %d s", n, n == 1 ? "" : "s", CM_ACK_WAIT_S);
    }
    /* connections a listener accepted that never became requests */
    for (struct cm_id *c = cm_first_id(), *n; c; c = n) {
        n = c->next_all;
        if (c->listener == id && !c->reported)
            cm_free_id(c);
        else if (c->listener == id)
            c->listener = NULL;
    }
    cm_free_id(id);
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

/* ---- addresses ---------------------------------------------------------------------- */

static socklen_t addr_len(const struct sockaddr *a)
{
    return a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* The GID an IP address stands for: IPv4-mapped, or the IPv6 address. */
static bool gid_of(const struct sockaddr *a, union ibv_gid *g, bool *wildcard)
{
    memset(g, 0, sizeof *g);
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)a;
        g->raw[10] = g->raw[11] = 0xff;
        memcpy(g->raw + 12, &s->sin_addr, 4);
        *wildcard = s->sin_addr.s_addr == htonl(INADDR_ANY);
        return true;
    }
    if (a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)a;
        memcpy(g->raw, &s->sin6_addr, 16);
        *wildcard = IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr);
        return true;
    }
    return false;
}

/* cm_lock held */
int cm_bind_local(struct cm_id *id, const struct sockaddr *addr)
{
    union ibv_gid want;
    bool wildcard = false;
    if (!gid_of(addr, &want, &wildcard))
        return -EAFNOSUPPORT;
    memcpy(&id->pub.route.addr.src_storage, addr, addr_len(addr));
    if (wildcard)
        return 0;               /* a device is chosen when a request comes */
    int n;
    struct cm_dev *d = cm_devs(&n);
    for (int i = 0; i < n; i++)
        for (uint8_t port = 1; port <= d[i].nports; port++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(d[i].ctx, port, &pa) || pa.state != IBV_PORT_ACTIVE)
                continue;
            int found = -1;
            for (int k = 0; k < pa.gid_tbl_len; k++) {
                struct ibv_gid_entry e;
                int rc = ibv_query_gid_ex(d[i].ctx, port, (uint32_t)k, &e, 0);
                if (rc == ENODATA)
                    continue;
                if (rc) {       /* an untyped table: the plain query */
                    if (ibv_query_gid(d[i].ctx, port, k, &e.gid))
                        continue;
                    e.gid_type = IBV_GID_TYPE_IB;
                }
                if (memcmp(e.gid.raw, want.raw, 16) != 0)
                    continue;
                found = k;
                if (e.gid_type == IBV_GID_TYPE_ROCE_V2 || e.gid_type == IBV_GID_TYPE_IB)
                    break;      /* RoCE v2 is rdma-cm's default where there is a choice */
            }
            if (found >= 0) {
                id->dev = &d[i];
                id->pub.verbs = d[i].ctx;
                id->pub.port_num = port;
                id->gid_index = found;
                id->sgid = want;
                id->pub.route.addr.addr.ibaddr.sgid = want;
                id->pub.route.addr.addr.ibaddr.pkey = htons(CM_DEFAULT_PKEY);
                return 0;
            }
        }
    return -EADDRNOTAVAIL;
}

int rdma_bind_addr(struct rdma_cm_id *rid, struct sockaddr *addr)
{
    struct cm_id *id = cm_id_of(rid);
    if (!addr)
        return cm_fail("rdma_bind_addr", EINVAL, "no address");
    pthread_mutex_lock(&cm_lock);
    int rc = id->state == CS_IDLE ? cm_bind_local(id, addr) : -EINVAL;
    if (rc == 0)
        id->state = CS_BOUND;
    pthread_mutex_unlock(&cm_lock);
    if (rc == -EADDRNOTAVAIL)
        return cm_fail("rdma_bind_addr", EADDRNOTAVAIL, "no soft device has a GID for that "
                       "address (ibv_devinfo -v lists them)");
    return rc ? cm_fail("rdma_bind_addr", -rc, "the id is not idle, or not an IP address") : 0;
}

/* The address the kernel would send from towards dst. */
static int source_for(const struct sockaddr *dst, struct sockaddr_storage *src)
{
    int s = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    socklen_t len = sizeof *src;
    int rc = connect(s, dst, addr_len(dst)) == 0 &&
             getsockname(s, (struct sockaddr *)src, &len) == 0 ? 0 : -errno;
    close(s);
    if (rc == 0)
        ((struct sockaddr_in *)src)->sin_port = 0;
    return rc;
}

int rdma_resolve_addr(struct rdma_cm_id *rid, struct sockaddr *src, struct sockaddr *dst,
                      int timeout_ms)
{
    struct cm_id *id = cm_id_of(rid);
    if (!dst || (dst->sa_family != AF_INET && dst->sa_family != AF_INET6))
        return cm_fail("rdma_resolve_addr", EINVAL, "the destination is not an IP address");
    struct sockaddr_storage from;
    int rc = 0;
    if (src && src->sa_family != AF_UNSPEC)
        memcpy(&from, src, addr_len(src));
    else if ((rc = source_for(dst, &from)) != 0)
        return cm_fail("rdma_resolve_addr", -rc, "no route to the destination");
    pthread_mutex_lock(&cm_lock);
    if (id->state != CS_IDLE && id->state != CS_BOUND) {
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_resolve_addr", EINVAL, "the id is in use");
    }
    memcpy(&id->pub.route.addr.dst_storage, dst, addr_len(dst));
    union ibv_gid dgid;
    bool wild;
    gid_of(dst, &dgid, &wild);
    id->pub.route.addr.addr.ibaddr.dgid = dgid;
    rc = id->dev ? 0 : cm_bind_local(id, (struct sockaddr *)&from);
    if (rc == 0 && !id->dev)
        rc = -EADDRNOTAVAIL;     /* a wildcard source */
    struct cm_event *e;
    if (rc == 0) {
        id->state = CS_ADDR;
        e = cm_event_new(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    } else {
        cm_say("rdma_resolve_addr", -rc, "the source address has no GID on a soft device");
        e = cm_event_new(id, RDMA_CM_EVENT_ADDR_ERROR, rc);
    }
    cm_queue(id->chan, e);
    int ret = 0;
    if (id->chan->sync && cm_sync_wait(id, RDMA_CM_EVENT_ADDR_RESOLVED, timeout_ms) < 0)
        ret = -1;
    pthread_mutex_unlock(&cm_lock);
    return ret;
}

/* One path, RoCE style: the GIDs, the default P_Key, the port's MTU. */
void cm_fill_route(struct cm_id *id)
{
    struct ibv_sa_path_rec *p = &id->path;
    memset(p, 0, sizeof *p);
    p->sgid = id->pub.route.addr.addr.ibaddr.sgid;
    p->dgid = id->pub.route.addr.addr.ibaddr.dgid;
    p->pkey = htons(CM_DEFAULT_PKEY);
    p->hop_limit = CM_HOP_LIMIT;
    p->reversible = 1;
    p->numb_path = 1;
    struct ibv_port_attr pa;
    p->mtu = id->pub.verbs && ibv_query_port(id->pub.verbs, id->pub.port_num, &pa) == 0
                 ? (uint8_t)pa.active_mtu : IBV_MTU_1024;
    p->mtu_selector = 2;        /* exactly */
    p->rate_selector = 2;
    p->rate = IBV_RATE_100_GBPS;
    p->packet_life_time_selector = 2;
    p->packet_life_time = CM_ACK_TIMEOUT - 1;
    id->pub.route.path_rec = p;
    id->pub.route.num_paths = 1;
}

int rdma_resolve_route(struct rdma_cm_id *rid, int timeout_ms)
{
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    if (id->state != CS_ADDR) {
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_resolve_route", EINVAL, "resolve the address first");
    }
    cm_fill_route(id);
    id->state = CS_ROUTE;
    cm_queue(id->chan, cm_event_new(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
    int ret = 0;
    if (id->chan->sync && cm_sync_wait(id, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_ms) < 0)
        ret = -1;
    pthread_mutex_unlock(&cm_lock);
    return ret;
}

static __be16 port_of(const struct sockaddr_storage *s)
{
    if (s->ss_family == AF_INET)
        return ((const struct sockaddr_in *)s)->sin_port;
    if (s->ss_family == AF_INET6)
        return ((const struct sockaddr_in6 *)s)->sin6_port;
    return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id) { return port_of(&id->route.addr.src_storage); }
__be16 rdma_get_dst_port(struct rdma_cm_id *id) { return port_of(&id->route.addr.dst_storage); }

/* The type of service, reuse and v6-only settings change nothing a TCP CM
 * or the soft device does; a manual path (RDMA_OPTION_IB_PATH) is not
 * supported: the route is always the direct one. */
int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
    (void)id, (void)optval, (void)optlen;
    if (level == RDMA_OPTION_ID && optname >= RDMA_OPTION_ID_TOS &&
        optname <= RDMA_OPTION_ID_ACK_TIMEOUT)
        return 0;
    return cm_fail("rdma_set_option", level == RDMA_OPTION_IB ? EOPNOTSUPP : EINVAL,
                   "level %d option %d", level, optname);
}

/* ---- QPs on ids --------------------------------------------------------------------------- */

static struct ibv_pd *default_pd(struct cm_id *id)
{
    if (!id->dev->pd)
        id->dev->pd = ibv_alloc_pd(id->dev->ctx);
    return id->dev->pd;
}

/* rdma-cm makes the CQs (each with its channel) when the caller gives none. */
static int make_cqs(struct cm_id *id, struct ibv_cq **send_cq, struct ibv_cq **recv_cq,
                    uint32_t send_wr, uint32_t recv_wr)
{
    if (*send_cq && *recv_cq)
        return 0;
    struct ibv_context *ctx = id->pub.verbs;
    if (!*recv_cq) {
        id->pub.recv_cq_channel = ibv_create_comp_channel(ctx);
        id->pub.recv_cq = id->pub.recv_cq_channel
                              ? ibv_create_cq(ctx, recv_wr ? (int)recv_wr : 1, &id->pub,
                                              id->pub.recv_cq_channel, 0) : NULL;
        if (!id->pub.recv_cq)
            return -errno;
        *recv_cq = id->pub.recv_cq;
    }
    if (!*send_cq) {
        id->pub.send_cq_channel = ibv_create_comp_channel(ctx);
        id->pub.send_cq = id->pub.send_cq_channel
                              ? ibv_create_cq(ctx, send_wr ? (int)send_wr : 1, &id->pub,
                                              id->pub.send_cq_channel, 0) : NULL;
        if (!id->pub.send_cq)
            return -errno;
        *send_cq = id->pub.send_cq;
    }
    id->own_cqs = true;
    return 0;
}

static void free_cqs(struct cm_id *id)
{
    if (!id->own_cqs)
        return;
    if (id->pub.send_cq)
        ibv_destroy_cq(id->pub.send_cq);
    if (id->pub.recv_cq)
        ibv_destroy_cq(id->pub.recv_cq);
    if (id->pub.send_cq_channel)
        ibv_destroy_comp_channel(id->pub.send_cq_channel);
    if (id->pub.recv_cq_channel)
        ibv_destroy_comp_channel(id->pub.recv_cq_channel);
    id->pub.send_cq = id->pub.recv_cq = NULL;
    id->pub.send_cq_channel = id->pub.recv_cq_channel = NULL;
    id->own_cqs = false;
}

/* A new QP goes to INIT at once (RC, UC), or all the way to RTS (UD), as
 * rdma-cm does. cm_lock held. */
static int init_new_qp(struct cm_id *id)
{
    struct ibv_qp_attr a;
    int mask;
    a.qp_state = IBV_QPS_INIT;
    if (rdma_init_qp_attr(&id->pub, &a, &mask) || ibv_modify_qp(id->pub.qp, &a, mask))
        return -(errno ? errno : EINVAL);
    if (id->pub.qp->qp_type != IBV_QPT_UD)
        return 0;
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE))
        return -errno;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = id->psn;
    return ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) ? -errno : 0;
}

static int create_qp(struct cm_id *id, struct ibv_qp_init_attr_ex *ax, const char *call)
{
    if (!id->pub.verbs || !id->dev)
        return cm_fail(call, EINVAL, "the id has no device yet (resolve or bind an address, "
                       "or use the id of a connect request)");
    if (!ax->pd && !(ax->pd = default_pd(id)))
        return cm_fail(call, errno, "no protection domain");
    int rc = make_cqs(id, &ax->send_cq, &ax->recv_cq, ax->cap.max_send_wr, ax->cap.max_recv_wr);
    if (rc) {
        free_cqs(id);
        return cm_fail(call, -rc, "cannot make the completion queues");
    }
    ax->comp_mask |= IBV_QP_INIT_ATTR_PD;
    struct ibv_qp *qp = ibv_create_qp_ex(id->pub.verbs, ax);
    if (!qp) {
        int e = errno;
        free_cqs(id);
        return cm_fail(call, e, "ibv_create_qp failed");
    }
    id->pub.qp = qp;
    id->pub.pd = ax->pd;
    id->pub.qp_type = qp->qp_type;
    rc = init_new_qp(id);
    if (rc) {
        ibv_destroy_qp(qp);
        id->pub.qp = NULL;
        free_cqs(id);
        return cm_fail(call, -rc, "the new QP would not go to INIT");
    }
    return 0;
}

int rdma_create_qp_ex(struct rdma_cm_id *rid, struct ibv_qp_init_attr_ex *attr)
{
    pthread_mutex_lock(&cm_lock);
    int rc = create_qp(cm_id_of(rid), attr, "rdma_create_qp_ex");
    pthread_mutex_unlock(&cm_lock);
    return rc;
}

int rdma_create_qp(struct rdma_cm_id *rid, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct ibv_qp_init_attr_ex ax = {.qp_context = attr->qp_context, .send_cq = attr->send_cq,
                                     .recv_cq = attr->recv_cq, .srq = attr->srq,
                                     .cap = attr->cap, .qp_type = attr->qp_type,
                                     .sq_sig_all = attr->sq_sig_all,
                                     .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
    pthread_mutex_lock(&cm_lock);
    int rc = create_qp(cm_id_of(rid), &ax, "rdma_create_qp");
    pthread_mutex_unlock(&cm_lock);
    if (rc == 0) {
        attr->cap = ax.cap;
        attr->send_cq = ax.send_cq;
        attr->recv_cq = ax.recv_cq;
    }
    return rc;
}

void rdma_destroy_qp(struct rdma_cm_id *rid)
{
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    if (id->pub.qp)
        ibv_destroy_qp(id->pub.qp);
    id->pub.qp = NULL;
    free_cqs(id);
    pthread_mutex_unlock(&cm_lock);
}

/* The attributes for the QP's next state, from what the two sides agreed
 * (the peer's REQ or REP). */
int rdma_init_qp_attr(struct rdma_cm_id *rid, struct ibv_qp_attr *a, int *mask)
{
    struct cm_id *id = cm_id_of(rid);
    enum ibv_qp_state want = a->qp_state;
    bool ud = id->pub.qp_type == IBV_QPT_UD;
    bool rc = id->pub.qp_type == IBV_QPT_RC;
    memset(a, 0, sizeof *a);
    a->qp_state = want;
    switch (want) {
    case IBV_QPS_INIT:
        a->pkey_index = 0;
        a->port_num = id->pub.port_num;
        *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if (ud) {
            a->qkey = RDMA_UDP_QKEY;
            *mask |= IBV_QP_QKEY;
        } else {
            a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
            *mask |= IBV_QP_ACCESS_FLAGS;
        }
        return 0;
    case IBV_QPS_RTR:
        if (ud) {
            *mask = IBV_QP_STATE;
            return 0;
        }
        if (!id->peer_known)
            return cm_fail("rdma_init_qp_attr", EINVAL, "RTR needs the peer's QP: connect "
                           "first (or answer a request)");
        struct ibv_port_attr pa;
        if (ibv_query_port(id->pub.verbs, id->pub.port_num, &pa))
            return cm_fail("rdma_init_qp_attr", errno, "port %u", id->pub.port_num);
        a->path_mtu = pa.active_mtu;
        a->dest_qp_num = id->peer.qpn;
        a->rq_psn = id->peer.psn;
        a->ah_attr.is_global = 1;
        memcpy(a->ah_attr.grh.dgid.raw, id->peer.gid, 16);
        a->ah_attr.grh.sgid_index = (uint8_t)id->gid_index;
        a->ah_attr.grh.hop_limit = CM_HOP_LIMIT;
        a->ah_attr.port_num = id->pub.port_num;
        *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (rc) {
            a->max_dest_rd_atomic = id->out_resp_res;
            a->min_rnr_timer = CM_MIN_RNR_TIMER;
            *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        return 0;
    case IBV_QPS_RTS:
        a->sq_psn = id->psn;
        *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        if (rc) {
            a->timeout = CM_ACK_TIMEOUT;
            /* the REQ's retry count serves both sides; each side's RNR
             * retries are what the other asked for (REQ, REP) */
            a->retry_cnt = id->active ? id->conn.retry_count : id->peer.retry_count;
            a->rnr_retry = id->peer.rnr_retry_count;
            a->max_rd_atomic = id->out_init_depth;
            *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_MAX_QP_RD_ATOMIC;
        }
        return 0;
    default:
        return cm_fail("rdma_init_qp_attr", EINVAL, "state %d: only INIT, RTR and RTS", want);
    }
}
