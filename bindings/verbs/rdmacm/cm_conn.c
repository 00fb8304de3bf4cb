/* cm_conn.c - connections: listen, connect, accept, reject, disconnect,
 * establish, and what each CM message from the peer does to an id.
 *
 * The id state machine (cm_lock held throughout):
 *
 *   active:   ROUTE --connect--> CONNECTING --TCP up, REQ sent--> REQ_SENT
 *             REQ_SENT --REP--> REP_RCVD (CONNECT_RESPONSE; with a QP,
 *                      rdma_get_cm_event moves it to RTR/RTS, sends RTU and
 *                      reports ESTABLISHED; without, rdma_establish sends RTU)
 *             REQ_SENT --REJ--> REJECTED (REJECTED, the QP to ERR)
 *   passive:  LISTEN --TCP connection--> a child, IDLE until its REQ
 *             IDLE --REQ--> REQ_RCVD (CONNECT_REQUEST on the listener's
 *                      channel) --accept: QP to RTR/RTS, REP--> REP_SENT
 *             REP_SENT --RTU--> ESTABLISHED;  REQ_RCVD --reject--> REJECTED
 *   both:     ESTABLISHED --disconnect: QP to ERR, DREQ--> DISCONNECTED
 *             (DISCONNECTED when the DREP, or the peer's DREQ, comes)
 *             a connection lost on the way gives UNREACHABLE / REJECTED
 *             (connecting), CONNECT_ERROR (accepting) or DISCONNECTED
 *   UD:       REQ and REP only: the REP gives the active side ESTABLISHED
 *             with the peer's QPN, QKEY and address; no RTU, no DREQ
 *
 * Everything else (connect twice, accept an id that had no request...) is
 * EINVAL with the reason under TBRT_DEBUG. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm.h"

/* IBTA CM reject reasons the events carry in status */
#define CM_REJ_INVALID_SERVICE_ID 8   /* nobody listens there */
#define CM_REJ_CONSUMER_DEFINED 28    /* rdma_reject */
/* A responder_resources / initiator_depth of 0xff means "the device's". */
#define CM_DEVICE_RD_ATOM 16

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static bool is_ud(const struct cm_id *id) { return id->pub.qp_type == IBV_QPT_UD; }

/* Keep the caller's connection parameters (private data copied). */
static int keep_conn(struct cm_id *id, const struct rdma_conn_param *p, size_t max_pdata,
                     const char *call)
{
    static const struct rdma_conn_param none = {.responder_resources = RDMA_MAX_RESP_RES,
                                                .initiator_depth = RDMA_MAX_INIT_DEPTH,
                                                .retry_count = 7, .rnr_retry_count = 7};
    if (!p)
        p = &none;
    if (p->private_data_len > max_pdata)
        return cm_fail(call, EINVAL, "%u bytes of private data; at most %zu here",
                       p->private_data_len, max_pdata);
    id->conn = *p;
    id->conn.private_data = NULL;
    id->out_resp_res = p->responder_resources == RDMA_MAX_RESP_RES ? CM_DEVICE_RD_ATOM
                                                                    : p->responder_resources;
    id->out_init_depth = p->initiator_depth == RDMA_MAX_INIT_DEPTH ? CM_DEVICE_RD_ATOM
                                                                   : p->initiator_depth;
    return 0;
}

static void fill_info(struct cm_id *id, struct cm_conn_info *c, const struct rdma_conn_param *p)
{
    memset(c, 0, sizeof *c);
    c->qpn = id->pub.qp ? id->pub.qp->qp_num : (p ? p->qp_num : 0);
    c->psn = id->psn;
    c->qkey = RDMA_UDP_QKEY;
    c->qp_type = (uint8_t)id->pub.qp_type;
    c->responder_resources = id->out_resp_res;
    c->initiator_depth = id->out_init_depth;
    c->retry_count = id->conn.retry_count & 7;
    c->rnr_retry_count = id->conn.rnr_retry_count & 7;
    c->srq = id->conn.srq;
    memcpy(c->gid, id->sgid.raw, 16);
    if (p && p->private_data && p->private_data_len) {
        c->pdata_len = p->private_data_len;
        memcpy(c->pdata, p->private_data, p->private_data_len);
    }
}

static int send_info(struct cm_id *id, enum cm_type type, const struct rdma_conn_param *p)
{
    struct cm_conn_info c;
    uint8_t buf[CM_MSG_MAX];
    fill_info(id, &c, p);
    return cm_send(id->sock, buf, cm_encode_info(buf, type, &c));
}

static int send_empty(struct cm_id *id, enum cm_type type)
{
    uint8_t buf[CM_HDR];
    return id->sock >= 0 ? cm_send(id->sock, buf, cm_encode_empty(buf, type)) : -ENOTCONN;
}

static void qp_to_err(struct cm_id *id)
{
    if (!id->pub.qp)
        return;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE);
}

/* Move the id's QP to RTR then RTS with what the two sides agreed. */
static int qp_connect(struct cm_id *id)
{
    if (!id->pub.qp || is_ud(id))
        return 0;
    struct ibv_qp_attr a;
    int mask;
    a.qp_state = IBV_QPS_RTR;
    if (rdma_init_qp_attr(&id->pub, &a, &mask))
        return -errno;
    int rc = ibv_modify_qp(id->pub.qp, &a, mask);
    if (rc)
        return -rc;
    a.qp_state = IBV_QPS_RTS;
    if (rdma_init_qp_attr(&id->pub, &a, &mask))
        return -errno;
    rc = ibv_modify_qp(id->pub.qp, &a, mask);
    return rc ? -rc : 0;
}

static void close_sock(struct cm_id *id)
{
    cm_service_forget(id);
    if (id->sock >= 0)
        close(id->sock);
    id->sock = -1;
}

/* Event parameters from what the peer sent. */
static void conn_param_of(struct cm_event *e, const struct cm_conn_info *c)
{
    struct rdma_conn_param *p = &e->pub.param.conn;
    memcpy(e->pdata, c->pdata, c->pdata_len);
    p->private_data = c->pdata_len ? e->pdata : NULL;
    p->private_data_len = c->pdata_len;
    p->responder_resources = c->responder_resources;
    p->initiator_depth = c->initiator_depth;
    p->retry_count = c->retry_count;
    p->rnr_retry_count = c->rnr_retry_count;
    p->srq = c->srq;
    p->qp_num = c->qpn;
}

static void ud_param_of(struct cm_event *e, struct cm_id *id, const struct cm_conn_info *c)
{
    struct rdma_ud_param *p = &e->pub.param.ud;
    memcpy(e->pdata, c->pdata, c->pdata_len);
    p->private_data = c->pdata_len ? e->pdata : NULL;
    p->private_data_len = c->pdata_len;
    p->qp_num = c->qpn;
    p->qkey = c->qkey;
    p->ah_attr.is_global = 1;
    memcpy(p->ah_attr.grh.dgid.raw, c->gid, 16);
    p->ah_attr.grh.sgid_index = (uint8_t)id->gid_index;
    p->ah_attr.grh.hop_limit = 64;
    p->ah_attr.port_num = id->pub.port_num;
}

/* ---- the caller's side ------------------------------------------------------------------ */

int rdma_listen(struct rdma_cm_id *rid, int backlog)
{
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    if (id->state != CS_BOUND) {
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_listen", EINVAL, "bind an address first (rdma_bind_addr)");
    }
    struct sockaddr *a = &id->pub.route.addr.src_addr;
    socklen_t len = a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                             : sizeof(struct sockaddr_in);
    int s = socket(a->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    int rc = s < 0 ? -errno : 0;
    if (rc == 0 && setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        rc = -errno;
    if (rc == 0 && bind(s, a, len) != 0)
        rc = -errno;
    if (rc == 0 && listen(s, backlog > 0 ? backlog : 16) != 0)
        rc = -errno;
    if (rc == 0) {
        socklen_t l = sizeof id->pub.route.addr.src_storage;
        getsockname(s, a, &l);  /* the port, when the caller let the kernel pick */
        id->sock = s;
        id->state = CS_LISTEN;
        rc = cm_service_watch(id, false);
    } else if (s >= 0) {
        close(s);
    }
    pthread_mutex_unlock(&cm_lock);
    return rc ? cm_fail("rdma_listen", -rc, "cannot listen on that address (TCP carries the "
                        "CM here)") : 0;
}

int rdma_connect(struct rdma_cm_id *rid, struct rdma_conn_param *conn_param)
{
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    if (id->state != CS_ROUTE) {
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_connect", EINVAL, "resolve the address and route first");
    }
    if (keep_conn(id, conn_param, is_ud(id) ? CM_SIDR_REQ_PDATA : CM_REQ_PDATA,
                  "rdma_connect")) {
        pthread_mutex_unlock(&cm_lock);
        return -1;
    }
    if (conn_param && conn_param->private_data_len) {
        memcpy(id->out_pdata, conn_param->private_data, conn_param->private_data_len);
        id->out_pdata_len = conn_param->private_data_len;  /* sent with the REQ */
    }
    id->conn.qp_num = conn_param ? conn_param->qp_num : 0;
    struct sockaddr *d = &id->pub.route.addr.dst_addr;
    socklen_t len = d->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                             : sizeof(struct sockaddr_in);
    int s = socket(d->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = s < 0 ? -errno : 0;
    if (rc == 0 && connect(s, d, len) != 0 && errno != EINPROGRESS)
        rc = -errno;
    if (rc) {
        if (s >= 0)
            close(s);
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_connect", -rc, "TCP connect to the peer's CM address");
    }
    id->sock = s;
    id->active = true;
    id->state = CS_CONNECTING;
    id->connect_deadline_ns = now_ns() + CM_CONNECT_TIMEOUT_MS * 1000000ull;
    rc = cm_service_watch(id, true);
    int ret = 0;
    if (id->chan->sync &&
        cm_sync_wait(id, id->pub.qp ? RDMA_CM_EVENT_ESTABLISHED : RDMA_CM_EVENT_CONNECT_RESPONSE,
                     CM_CONNECT_TIMEOUT_MS + 1000) < 0)
        ret = -1;
    pthread_mutex_unlock(&cm_lock);
    return rc ? cm_fail("rdma_connect", -rc, "cannot watch the connection") : ret;
}

/* The TCP connection is up (or failed): send the REQ. */
void cm_connected(struct cm_id *id, int err)
{
    if (id->state != CS_CONNECTING)
        return;
    if (!err) {
        struct rdma_conn_param p = id->conn;
        p.private_data = id->out_pdata_len ? id->out_pdata : NULL;
        p.private_data_len = id->out_pdata_len;
        err = -send_info(id, CM_REQ, &p);
        id->out_pdata_len = 0;
    }
    if (err) {
        cm_conn_lost(id, err, "connecting");
        return;
    }
    id->state = CS_REQ_SENT;
    cm_service_watch(id, false);
}

/* rdma_get_cm_event: a reply for the active side (cm_lock held). */
void cm_process_reply(struct cm_event *e)
{
    struct cm_id *id = e->owner;
    if (!id->pub.qp)
        return;                 /* the caller moves its QP, then rdma_establish */
    int rc = qp_connect(id);
    if (rc == 0)
        rc = send_empty(id, CM_RTU);
    if (rc == 0) {
        id->state = CS_ESTABLISHED;
        e->pub.event = RDMA_CM_EVENT_ESTABLISHED;
        return;
    }
    cm_say("rdma_get_cm_event", -rc, "the reply came, but the QP could not be connected");
    qp_to_err(id);
    id->state = CS_ERROR;
    e->pub.event = RDMA_CM_EVENT_CONNECT_ERROR;
    e->pub.status = rc;
}

int rdma_establish(struct rdma_cm_id *rid)
{
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    int rc = id->pub.qp || id->state != CS_REP_RCVD ? -EINVAL : send_empty(id, CM_RTU);
    if (rc == 0)
        id->state = CS_ESTABLISHED;
    pthread_mutex_unlock(&cm_lock);
    return rc ? cm_fail("rdma_establish", -rc, "only after a CONNECT_RESPONSE, on an id without "
                        "a QP") : 0;
}

int rdma_accept(struct rdma_cm_id *rid, struct rdma_conn_param *conn_param)
{
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    if (id->state != CS_REQ_RCVD) {
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_accept", EINVAL, "the id has no connect request to accept");
    }
    if (keep_conn(id, conn_param, CM_REP_PDATA, "rdma_accept")) {
        pthread_mutex_unlock(&cm_lock);
        return -1;
    }
    if (conn_param && conn_param->initiator_depth != RDMA_MAX_INIT_DEPTH &&
        id->out_init_depth > id->peer.responder_resources)
        id->out_init_depth = id->peer.responder_resources;
    int rc = qp_connect(id);
    if (rc == 0)
        rc = send_info(id, CM_REP, conn_param);
    if (rc) {
        qp_to_err(id);
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_accept", -rc, "connecting the QP or sending the reply");
    }
    id->state = is_ud(id) ? CS_ESTABLISHED : CS_REP_SENT;
    int ret = 0;
    if (id->chan->sync && !is_ud(id) &&
        cm_sync_wait(id, RDMA_CM_EVENT_ESTABLISHED, CM_CONNECT_TIMEOUT_MS) < 0)
        ret = -1;
    pthread_mutex_unlock(&cm_lock);
    return ret;
}

static int reject(struct rdma_cm_id *rid, const void *pdata, uint8_t len, uint8_t reason)
{
    struct cm_id *id = cm_id_of(rid);
    if (len > CM_REJ_PDATA)
        return cm_fail("rdma_reject", EINVAL, "%u bytes of private data; at most %d", len,
                       CM_REJ_PDATA);
    pthread_mutex_lock(&cm_lock);
    int rc = id->state == CS_REQ_RCVD ? 0 : -EINVAL;
    if (rc == 0) {
        uint8_t buf[CM_MSG_MAX];
        rc = cm_send(id->sock, buf, cm_encode_rej(buf, reason, pdata, len));
        id->state = CS_REJECTED;
        close_sock(id);
    }
    pthread_mutex_unlock(&cm_lock);
    return rc ? cm_fail("rdma_reject", -rc, "the id has no connect request to reject") : 0;
}

int rdma_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len)
{
    return reject(id, pdata, len, CM_REJ_CONSUMER_DEFINED);
}

/* IBTA: CM_REJ_VENDOR_OPTION_NOT_SUPPORTED */
int rdma_reject_ece(struct rdma_cm_id *id, const void *pdata, uint8_t len)
{
    return reject(id, pdata, len, 35);
}

int rdma_disconnect(struct rdma_cm_id *rid)
{
    struct cm_id *id = cm_id_of(rid);
    pthread_mutex_lock(&cm_lock);
    bool up = id->state == CS_ESTABLISHED || id->state == CS_REP_SENT ||
              id->state == CS_REP_RCVD;
    if (id->state == CS_DISCONNECTED) {
        /* the peer disconnected first: as the kernel, nothing more to do */
        qp_to_err(id);
        pthread_mutex_unlock(&cm_lock);
        return 0;
    }
    if (!up) {
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_disconnect", EINVAL, "the id is not connected");
    }
    qp_to_err(id);
    id->state = CS_DISCONNECTED;
    int rc = is_ud(id) ? 0 : send_empty(id, CM_DREQ);
    if (rc) {
        /* the peer is gone: nobody will answer */
        cm_conn_lost(id, -rc, "sending DREQ");
    }
    int ret = 0;
    if (id->chan->sync && !is_ud(id) && !id->disconnect_reported &&
        cm_sync_wait(id, RDMA_CM_EVENT_DISCONNECTED, CM_CONNECT_TIMEOUT_MS) < 0)
        ret = -1;
    pthread_mutex_unlock(&cm_lock);
    return ret;
}

/* ---- what the peer's messages do (service thread, cm_lock held) ---------------------------- */

static void report_disconnect(struct cm_id *id)
{
    id->state = CS_DISCONNECTED;
    if (id->disconnect_reported)
        return;
    id->disconnect_reported = true;
    cm_queue(id->chan, cm_event_new(id, RDMA_CM_EVENT_DISCONNECTED, 0));
}

void cm_conn_lost(struct cm_id *id, int err, const char *why)
{
    if (id->state != CS_DISCONNECTED)   /* after a disconnect an EOF is expected */
        cm_say("rdma_get_cm_event", err, "CM connection of id %llu lost (%s)",
               (unsigned long long)id->serial, why);
    close_sock(id);
    switch (id->state) {
    case CS_CONNECTING:
    case CS_REQ_SENT:
        qp_to_err(id);
        id->state = CS_ERROR;
        if (err == ECONNREFUSED)
            cm_queue(id->chan, cm_event_new(id, RDMA_CM_EVENT_REJECTED,
                                            CM_REJ_INVALID_SERVICE_ID));
        else
            cm_queue(id->chan, cm_event_new(id, RDMA_CM_EVENT_UNREACHABLE, -err));
        break;
    case CS_IDLE:
        /* a child that never sent its REQ: nobody knows it; its listener's
         * destroy frees it */
        id->state = CS_ERROR;
        break;
    case CS_REQ_RCVD:
    case CS_REP_SENT:
        id->state = CS_ERROR;
        cm_queue(id->chan, cm_event_new(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET));
        break;
    case CS_REP_RCVD:
    case CS_ESTABLISHED:
    case CS_DISCONNECTED:
        if (!is_ud(id))
            report_disconnect(id);
        break;
    default:
        break;
    }
}

void cm_incoming(struct cm_id *l, int sock)
{
    /* room for this one: the longest-silent connection goes first */
    int pending = 0;
    struct cm_id *oldest = NULL;
    for (struct cm_id *o = cm_first_id(); o; o = o->next_all)
        if (o->listener == l && !o->reported) {
            pending++;
            if (!oldest || o->serial < oldest->serial)
                oldest = o;
        }
    if (pending >= CM_PENDING_MAX && oldest) {
        cm_say("rdma_listen", EAGAIN, "%d connections wait to send their request: the oldest "
               "(id %llu) is closed", pending, (unsigned long long)oldest->serial);
        cm_free_id(oldest);
    }
    struct cm_id *c = calloc(1, sizeof *c);
    if (!c) {
        close(sock);
        return;
    }
    c->chan = l->chan;
    c->listener = l;
    c->sock = sock;
    c->gid_index = -1;
    c->pub.channel = l->pub.channel;
    c->pub.context = l->pub.context;
    c->pub.ps = l->pub.ps;
    c->pub.qp_type = l->pub.qp_type;
    c->psn = (l->psn * 1103515245u + 12345u + (uint32_t)sock) & 0xffffff;
    c->connect_deadline_ns = now_ns() + CM_CONNECT_TIMEOUT_MS * 1000000ull;  /* for its REQ */
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    if (getpeername(sock, (struct sockaddr *)&a, &len) == 0)
        memcpy(&c->pub.route.addr.dst_storage, &a, len);
    len = sizeof a;
    if (getsockname(sock, (struct sockaddr *)&a, &len) == 0 &&
        cm_bind_local(c, (struct sockaddr *)&a) != 0)
        cm_say("rdma_listen", EADDRNOTAVAIL, "a request came to an address no soft device has "
               "a GID for; it will be rejected");
    cm_link(c);
    if (cm_service_watch(c, false) != 0) {
        cm_unlink(c);
        close(sock);
        free(c);
    }
}

static void on_req(struct cm_id *id, const struct cm_conn_info *info)
{
    struct cm_id *l = id->listener;
    if (!l || l->destroying || !id->dev) {
        uint8_t buf[CM_MSG_MAX];
        cm_send(id->sock, buf, cm_encode_rej(buf, CM_REJ_INVALID_SERVICE_ID, NULL, 0));
        cm_conn_lost(id, ECONNREFUSED, "rejected: no listener or no device for the address");
        return;
    }
    id->peer = *info;
    id->peer_known = true;
    id->pub.qp_type = info->qp_type == IBV_QPT_UD ? IBV_QPT_UD
                      : info->qp_type == IBV_QPT_UC ? IBV_QPT_UC : IBV_QPT_RC;
    union ibv_gid d;
    memcpy(d.raw, info->gid, 16);
    id->pub.route.addr.addr.ibaddr.dgid = d;
    cm_fill_route(id);
    id->state = CS_REQ_RCVD;
    id->reported = true;
    struct cm_event *e = cm_event_new(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    if (!e)
        return;
    e->pub.listen_id = &l->pub;
    if (is_ud(id))
        ud_param_of(e, id, info);
    else
        conn_param_of(e, info);
    cm_queue(id->chan, e);
}

static void on_rep(struct cm_id *id, const struct cm_conn_info *info)
{
    id->peer = *info;
    id->peer_known = true;
    if (id->out_init_depth > info->responder_resources)
        id->out_init_depth = info->responder_resources;
    struct cm_event *e;
    if (is_ud(id)) {
        id->state = CS_ESTABLISHED;
        e = cm_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);
        if (e)
            ud_param_of(e, id, info);
    } else {
        id->state = CS_REP_RCVD;
        e = cm_event_new(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
        if (e)
            conn_param_of(e, info);
    }
    cm_queue(id->chan, e);
}

void cm_handle(struct cm_id *id, enum cm_type type, const struct cm_conn_info *info,
               uint8_t reason)
{
    switch (type) {
    case CM_REQ:
        if (id->state == CS_IDLE && id->listener)
            return on_req(id, info);
        break;
    case CM_REP:
        if (id->state == CS_REQ_SENT)
            return on_rep(id, info);
        break;
    case CM_REJ:
        if (id->state == CS_REQ_SENT) {
            qp_to_err(id);
            id->state = CS_REJECTED;
            struct cm_event *e = cm_event_new(id, RDMA_CM_EVENT_REJECTED, reason);
            if (e)
                conn_param_of(e, info);
            cm_queue(id->chan, e);
            close_sock(id);
            return;
        }
        break;
    case CM_RTU:
        if (id->state == CS_REP_SENT) {
            id->state = CS_ESTABLISHED;
            cm_queue(id->chan, cm_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0));
            return;
        }
        break;
    case CM_DREQ:
        if (id->state == CS_ESTABLISHED || id->state == CS_REP_RCVD ||
            id->state == CS_REP_SENT || id->state == CS_DISCONNECTED) {
            send_empty(id, CM_DREP);
            report_disconnect(id);
            return;
        }
        break;
    case CM_DREP:
        if (id->state == CS_DISCONNECTED) {
            report_disconnect(id);
            return;
        }
        break;
    }
    cm_conn_lost(id, EPROTO, "a CM message out of turn");
}
