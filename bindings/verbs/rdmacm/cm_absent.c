/* cm_absent.c - what this librdmacm does not provide, each failing with
 * EOPNOTSUPP and saying so under TBRT_DEBUG: multicast (the soft device has
 * no groups), ECE (no vendor options), and the rsockets API (rdma/rsocket.h:
 * sockets carried by RDMA QPs), which needs its own stream protocol on top
 * of the QPs (credits, flow control, iomap), a larger job than the
 * connection manager; programs that want sockets can use TCP. */
#include <errno.h>
#include <rdma/rsocket.h>

#include "cm.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
    (void)id, (void)event;
    return 0;                   /* the CM here needs no word of the QP's first event */
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
    (void)id, (void)addr, (void)context;
    return cm_fail("rdma_join_multicast", EOPNOTSUPP, "the soft device has no multicast groups");
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr,
                           void *context)
{
    (void)id, (void)attr, (void)context;
    return cm_fail("rdma_join_multicast_ex", EOPNOTSUPP, "the soft device has no multicast "
                   "groups");
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
    (void)id, (void)addr;
    return cm_fail("rdma_leave_multicast", EOPNOTSUPP, "the soft device has no multicast groups");
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
    (void)id, (void)ece;
    return cm_fail("rdma_set_local_ece", EOPNOTSUPP, "no vendor options to negotiate");
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
    (void)id, (void)ece;
    return cm_fail("rdma_get_remote_ece", EOPNOTSUPP, "no vendor options to negotiate");
}

/* ---- rsockets ---------------------------------------------------------------------------- */

static int no(const char *call)
{
    return cm_fail(call, EOPNOTSUPP, "rsockets are not provided by tbrt's librdmacm");
}

int rsocket(int domain, int type, int protocol) { return no("rsocket"); }
int rbind(int s, const struct sockaddr *addr, socklen_t len) { return no("rbind"); }
int rlisten(int s, int backlog) { return no("rlisten"); }
int raccept(int s, struct sockaddr *addr, socklen_t *len) { return no("raccept"); }
int rconnect(int s, const struct sockaddr *addr, socklen_t len) { return no("rconnect"); }
int rshutdown(int s, int how) { return no("rshutdown"); }
int rclose(int s) { return no("rclose"); }
ssize_t rrecv(int s, void *buf, size_t len, int flags) { return no("rrecv"); }
ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *l)
{
    return no("rrecvfrom");
}
ssize_t rrecvmsg(int s, struct msghdr *msg, int flags) { return no("rrecvmsg"); }
ssize_t rsend(int s, const void *buf, size_t len, int flags) { return no("rsend"); }
ssize_t rsendto(int s, const void *buf, size_t len, int flags, const struct sockaddr *dst,
                socklen_t l)
{
    return no("rsendto");
}
ssize_t rsendmsg(int s, const struct msghdr *msg, int flags) { return no("rsendmsg"); }
ssize_t rread(int s, void *buf, size_t count) { return no("rread"); }
ssize_t rreadv(int s, const struct iovec *iov, int iovcnt) { return no("rreadv"); }
ssize_t rwrite(int s, const void *buf, size_t count) { return no("rwrite"); }
ssize_t rwritev(int s, const struct iovec *iov, int iovcnt) { return no("rwritev"); }
int rpoll(struct pollfd *fds, nfds_t nfds, int timeout) { return no("rpoll"); }
int rselect(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *t) { return no("rselect"); }
int rgetpeername(int s, struct sockaddr *addr, socklen_t *len) { return no("rgetpeername"); }
int rgetsockname(int s, struct sockaddr *addr, socklen_t *len) { return no("rgetsockname"); }
int rsetsockopt(int s, int level, int name, const void *val, socklen_t len)
{
    return no("rsetsockopt");
}
int rgetsockopt(int s, int level, int name, void *val, socklen_t *len) { return no("rgetsockopt"); }
int rfcntl(int s, int cmd, ...) { return no("rfcntl"); }
off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
    return no("riomap");
}
int riounmap(int s, void *buf, size_t len) { return no("riounmap"); }
size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
    no("riowrite");
    return 0;
}
