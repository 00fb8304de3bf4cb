/* cm_id.c - ids and their addresses: the device table (rdma_get_devices),
 * creating and destroying ids, binding and resolving addresses to a
 * device, port and GID, the route, options. */
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
    /* events never handed out go with it; those handed out wait for acks */
    if (!id->chan->sync)
        cm_chan_drop(id->chan, id);
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
