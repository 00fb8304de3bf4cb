/* cm_ep.c - the synchronous convenience API over the event API:
 * rdma_getaddrinfo, rdma_create_ep / rdma_destroy_ep, rdma_get_request
 * (rdma_client, rdma_server), and the SRQ calls of rdma_verbs.h, which the
 * soft device cannot serve. */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_verbs.h>

#include "cm.h"

static struct sockaddr *copy_addr(const struct sockaddr *a, socklen_t len)
{
    struct sockaddr *c = malloc(len);
    if (c)
        memcpy(c, a, len);
    return c;
}

/* One entry: the node's first address of the wanted family, as the source
 * of a passive endpoint or the destination of an active one. */
int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
                     struct rdma_addrinfo **res)
{
    if (!res || (!node && !service))
        return cm_fail("rdma_getaddrinfo", EINVAL, "no node and no service");
    struct addrinfo h = {.ai_socktype = SOCK_STREAM};
    int flags = hints ? hints->ai_flags : 0;
    if (flags & RAI_PASSIVE)
        h.ai_flags |= AI_PASSIVE;
    if (flags & RAI_NUMERICHOST)
        h.ai_flags |= AI_NUMERICHOST;
    if (hints && (flags & RAI_FAMILY))
        h.ai_family = hints->ai_family;
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(node, service, &h, &ai);
    if (rc)
        return cm_fail("rdma_getaddrinfo", rc == EAI_SYSTEM ? errno : EADDRNOTAVAIL, "%s",
                       gai_strerror(rc));
    struct rdma_addrinfo *r = calloc(1, sizeof *r);
    if (!r) {
        freeaddrinfo(ai);
        return cm_fail("rdma_getaddrinfo", ENOMEM, "out of memory");
    }
    r->ai_flags = flags;
    r->ai_family = ai->ai_family;
    r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
    r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
                       : r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
    if (flags & RAI_PASSIVE) {
        r->ai_src_addr = copy_addr(ai->ai_addr, ai->ai_addrlen);
        r->ai_src_len = ai->ai_addrlen;
    } else {
        r->ai_dst_addr = copy_addr(ai->ai_addr, ai->ai_addrlen);
        r->ai_dst_len = ai->ai_addrlen;
        if (hints && hints->ai_src_addr && hints->ai_src_len) {
            r->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
            r->ai_src_len = hints->ai_src_len;
        }
    }
    freeaddrinfo(ai);
    *res = r;
    return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
    while (res) {
        struct rdma_addrinfo *n = res->ai_next;
        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_route);
        free(res->ai_connect);
        free(res);
        res = n;
    }
}

#define CM_EP_RESOLVE_MS 2000

int rdma_create_ep(struct rdma_cm_id **out, struct rdma_addrinfo *res, struct ibv_pd *pd,
                   struct ibv_qp_init_attr *qp_init_attr)
{
    if (!out || !res)
        return cm_fail("rdma_create_ep", EINVAL, "no id pointer or no address");
    struct rdma_cm_id *id;
    if (rdma_create_id(NULL, &id, NULL, (enum rdma_port_space)res->ai_port_space))
        return -1;
    /* the QP type comes from the address info, as librdmacm has it */
    enum ibv_qp_type type = res->ai_qp_type ? (enum ibv_qp_type)res->ai_qp_type : IBV_QPT_RC;
    id->qp_type = type;
    if (qp_init_attr)
        qp_init_attr->qp_type = type;
    int rc;
    if (res->ai_flags & RAI_PASSIVE) {
        rc = rdma_bind_addr(id, res->ai_src_addr);
        if (rc == 0 && qp_init_attr) {
            struct cm_id *c = cm_id_of(id);
            c->ep_qp = true;
            c->ep_pd = pd;
            c->ep_attr = *qp_init_attr;
        }
    } else {
        rc = rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, CM_EP_RESOLVE_MS);
        if (rc == 0)
            rc = rdma_resolve_route(id, CM_EP_RESOLVE_MS);
        if (rc == 0 && qp_init_attr)
            rc = rdma_create_qp(id, pd, qp_init_attr);
    }
    if (rc) {
        int e = errno;
        rdma_destroy_id(id);
        errno = e;
        return -1;
    }
    *out = id;
    return 0;
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
    if (!id)
        return;
    if (id->qp)
        rdma_destroy_qp(id);
    rdma_destroy_id(id);
}

/* The next request to a synchronous listener, as an id of its own
 * (synchronous too), with the QP rdma_create_ep asked for. */
int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **out)
{
    struct cm_id *l = cm_id_of(listen);
    if (!out)
        return cm_fail("rdma_get_request", EINVAL, "no id pointer");
    pthread_mutex_lock(&cm_lock);
    if (!l->chan->sync || l->state != CS_LISTEN) {
        pthread_mutex_unlock(&cm_lock);
        return cm_fail("rdma_get_request", EINVAL, "a synchronous (rdma_create_ep) listening id "
                       "only");
    }
    int got = cm_sync_wait(l, RDMA_CM_EVENT_CONNECT_REQUEST, -1);
    struct rdma_cm_event *e = l->pub.event;
    l->pub.event = NULL;
    pthread_mutex_unlock(&cm_lock);
    if (got < 0 || !e)
        return -1;
    struct cm_id *c = cm_id_of(e->id);
    struct cm_chan *own = cm_chan_new(true);
    pthread_mutex_lock(&cm_lock);
    if (own) {
        c->chan = own;          /* its own waits, not the listener's */
        c->pub.channel = &own->pub;
    }
    c->pub.event = e;           /* acked when the id is destroyed */
    struct ibv_qp_init_attr a = l->ep_attr;
    bool qp = l->ep_qp;
    struct ibv_pd *pd = l->ep_pd;
    pthread_mutex_unlock(&cm_lock);
    if (!own)
        return cm_fail("rdma_get_request", ENOMEM, "no channel for the request's id");
    if (qp && rdma_create_qp(&c->pub, pd, &a))
        return -1;
    *out = &c->pub;
    return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
    (void)id, (void)pd, (void)attr;
    return cm_fail("rdma_create_srq", EOPNOTSUPP, "the soft device has no shared receive queues");
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
    (void)id, (void)attr;
    return cm_fail("rdma_create_srq_ex", EOPNOTSUPP, "the soft device has no shared receive "
                   "queues");
}

void rdma_destroy_srq(struct rdma_cm_id *id) { (void)id; }
