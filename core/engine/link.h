/* link.h - the engine's link object and the transports under it.
 *
 * A link is one bootstrap TCP socket plus a transport:
 *   rdma  (rdma.c)  stride rings over a device of the device interface
 *   tcp   (tcp/)    the plain byte stream of the bootstrap socket itself
 * link.c holds what both share: options, states, errors, waiting, close. */
#ifndef TBRT_LINK_H
#define TBRT_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "dev/dev.h"

struct link_transport {
    const char *name;
    intptr_t (*send)(tbrt_link *l, const void *buf, size_t len);
    intptr_t (*recv)(tbrt_link *l, void *buf, size_t len);
    int (*flush)(tbrt_link *l);
    int (*progress)(tbrt_link *l);
    int (*activate)(tbrt_link *l, const tbrt_caps *peer);
    int (*arm)(tbrt_link *l);
    int (*fds)(tbrt_link *l, int *fds, int max);
    bool (*writable)(tbrt_link *l);
    size_t (*readable)(tbrt_link *l);
    bool (*idle)(tbrt_link *l);          /* nothing of ours in flight */
    void (*teardown)(tbrt_link *l);
};

extern const struct link_transport link_rdma;
extern const struct link_transport link_tcp;

struct link_inq {
    uint32_t buf;
    uint32_t off;
    uint32_t len;
};

struct tbrt_link {
    int id;
    int state;                  /* enum tbrt_link_state */
    int err;                    /* errno of the failure that broke it */
    char why[TBRT_WHY_MAX];
    const struct link_transport *t;
    tbrt_link_opts opts;
    char device_opt[TBRT_NAME_MAX], personality_opt[16], ports_opt[32], pci_opt[32];
    int fd;                     /* bootstrap socket */
    tbrt_link_stats stats;
    tbrt_link_info info;
    char teardown_log[128];
    bool bye;                   /* the peer closed the link in order */
    bool peer_dead;             /* the bootstrap socket failed */
    bool fallback;              /* RDMA link that fell back to TCP */
    double last_live_check;
    double last_port_check;
    unsigned live_tick;
    int inject;                 /* test hook: corrupt the next frame */

    /* rdma */
    tbrt_dev *dev;
    tbrt_pd *pd;
    tbrt_cq *cq;
    tbrt_qp *qp;
    tbrt_mr *send_mr, *recv_mr;
    uint8_t *send_mem, *recv_mem;
    size_t ring_bytes;
    uint32_t nbuf, stride, payload;
    int flavor, framing, qp_type;
    uint8_t port;
    int gid_index;
    uint8_t gid[16];
    uint16_t lid;
    uint32_t psn;
    enum ibv_mtu mtu;
    tbrt_caps peer;
    /* send ring: strides [send_head, send_head+send_count) are in flight */
    uint32_t send_head, send_count;
    int pend_buf;               /* stride being filled, -1 when none */
    uint32_t pend_len;
    uint32_t send_seq;
    /* receive ring: completed strides waiting for the reader, in order */
    struct link_inq *inq;
    uint32_t inq_head, inq_count;
    size_t inq_bytes;
    uint32_t recv_seq;
    uint32_t recv_posted;

    /* tcp */
    uint8_t *tcp_buf;
    size_t tcp_len, tcp_cap;
    bool tcp_eof;
    bool ready_sent;
    int close_err;              /* a teardown step that failed */
    char close_why[TBRT_WHY_MAX];
};

/* Break the link: record the errno and a message "link N: <op>: ...";
 * returns -err. A broken link keeps its first error. */
int link_fail(tbrt_link *l, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A failure of one call that leaves the link usable (a timeout); -err. */
int link_note(tbrt_link *l, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Whether the link may be used for data now; 0, or -errno with a message. */
int link_usable(tbrt_link *l, const char *op);

/* wait.c: spin, then sleep on the fds, until cond holds or timeout (s). */
typedef bool (*link_cond)(tbrt_link *l, void *arg);
int link_wait(tbrt_link *l, link_cond cond, void *arg, double timeout, const char *what,
              bool writing);
int link_wait_idle(tbrt_link *l, double timeout);

/* Note a step of the teardown ("qp", "mr", ...) for tbrt_link_teardown. */
void link_log_teardown(tbrt_link *l, const char *what);

/* liveness.c: the bootstrap socket as the liveness anchor */
int link_socket_setup(tbrt_link *l, char *err, size_t errlen);
/* Look at the bootstrap socket without blocking: the goodbye byte, EOF or an
 * error mark the peer closed/dead. force: do it now, not rate-limited. */
int link_check_liveness(tbrt_link *l, bool force);
int link_send_byte(tbrt_link *l, uint8_t b);
/* 1 byte read, 0 would block, <0 error (EOF is -ECONNRESET). */
int link_recv_byte(tbrt_link *l, uint8_t *b);

/* select.c: the device, port and GID facing the peer of the socket */
int link_select_device(tbrt_link *l, char *err, size_t errlen);

/* rdma.c / tcp_link.c */
int link_rdma_setup(tbrt_link *l, char *err, size_t errlen);
int link_tcp_setup(tbrt_link *l, char *err, size_t errlen);

#endif
