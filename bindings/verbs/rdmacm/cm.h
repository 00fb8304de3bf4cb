/* cm.h - tbrt's librdmacm.so.1: the RDMA connection manager of rdma-core 44
 * (rdma/rdma_cma.h) in user space, over TCP, for programs that connect with
 * it (rping, ucmatose, udaddy, perftest -R, UCX's rdmacm transport).
 *
 * The kernel's CM exchanges its REQ/REP/RTU/REJ/DREQ messages as MADs on
 * the fabric; here they go over a TCP connection to the peer's CM address
 * (the IP address and port the program gives), so two processes using
 * this library reach each other wherever TCP does. What they agree on is
 * what the kernel's CM exchanges: QP numbers, starting PSNs, GIDs, the
 * conn_param depths and retry counts, private data, the UD QKEY. The QPs
 * then talk over tbrt's libibverbs and its soft device.
 *
 *   addresses   an IP address names a GID of a local soft device: the one
 *               equal to it as a GID (::ffff:a.b.c.d), the RoCE v2 entry
 *               where the table is typed; the source is the address the
 *               kernel would send from (a UDP connect says which)
 *   events      each channel is a queue and an eventfd counting its events
 *               (poll()able, O_NONBLOCK works); a service thread turns the
 *               TCP traffic into events; what librdmacm does in
 *               rdma_get_cm_event (moving the active side's QP to RTR/RTS
 *               on a reply, turning it into ESTABLISHED) happens there too
 *   ids         rdma-cm's state machine, one lock (cm_lock) for all of it;
 *               nothing blocks while holding it
 *
 * Wire format (network byte order; every field bounded on receipt, the
 * peer is never trusted for sizes): a header {magic "TBCM", version,
 * type, payload length} and per type:
 *   REQ/REP  qpn, psn, qkey, qp_type, responder_resources, initiator_depth,
 *            retry_count, rnr_retry_count, srq, gid[16], private data
 *   RTU, DREQ, DREP: nothing;  REJ: reason, private data */
#ifndef TBRT_CM_H
#define TBRT_CM_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* ---- the wire --------------------------------------------------------------- */

#define CM_MAGIC 0x5442434du       /* "TBCM" */
#define CM_VERSION 1
enum cm_type { CM_REQ = 1, CM_REP, CM_RTU, CM_REJ, CM_DREQ, CM_DREP };

/* Private data limits of the RDMA CM over IB (what the kernel accepts) */
#define CM_REQ_PDATA 56
#define CM_SIDR_REQ_PDATA 180
#define CM_REP_PDATA 196
#define CM_REJ_PDATA 148
#define CM_PDATA_MAX 196

struct cm_conn_info {          /* REQ and REP */
    uint32_t qpn, psn, qkey;
    uint8_t qp_type;
    uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count, srq;
    uint8_t gid[16];
    uint8_t pdata_len;
    uint8_t pdata[CM_PDATA_MAX];
};

#define CM_HDR 8
#define CM_INFO_FIXED 36           /* the fixed part of REQ/REP */
#define CM_MSG_MAX (CM_HDR + CM_INFO_FIXED + CM_PDATA_MAX)

/* Receive state of one TCP connection: one message at a time. */
struct cm_rx {
    uint8_t buf[CM_MSG_MAX];
    size_t have;
};

/* ---- objects ---------------------------------------------------------------- */

struct cm_dev {
    struct ibv_context *ctx;
    struct ibv_pd *pd;          /* for rdma_create_qp without a PD */
    uint8_t nports;
};

struct cm_event;
struct cm_id;

struct cm_chan {
    struct rdma_event_channel pub;  /* pub.fd: eventfd, counts queued events */
    struct cm_event *head, *tail;
    bool sync;                  /* private to a synchronous id */
};

enum cm_state {
    CS_IDLE, CS_BOUND, CS_LISTEN, CS_ADDR, CS_ROUTE, CS_CONNECTING, CS_REQ_SENT,
    CS_REQ_RCVD,                /* passive child: CONNECT_REQUEST reported */
    CS_REP_SENT, CS_REP_RCVD, CS_ESTABLISHED, CS_DISCONNECTED, CS_REJECTED, CS_ERROR,
};

struct cm_id {
    struct rdma_cm_id pub;
    enum cm_state state;
    struct cm_chan *chan;
    struct cm_id *listener;     /* children: who reported them */
    int sock;                   /* TCP: listener or connection; -1 */
    struct cm_rx rx;
    struct cm_dev *dev;
    int gid_index;
    union ibv_gid sgid;
    uint32_t psn;               /* our starting PSN */
    struct cm_conn_info peer;   /* what the other side sent (REQ or REP) */
    bool peer_known;
    struct rdma_conn_param conn; /* ours (connect / accept) */
    uint8_t out_resp_res, out_init_depth;
    uint8_t out_pdata[CM_PDATA_MAX];    /* the REQ's private data, until it goes */
    uint8_t out_pdata_len;
    bool reported;              /* a child whose CONNECT_REQUEST was queued */
    bool active;                /* this side connected (REQ sender) */
    bool disconnect_reported;
    uint64_t serial;            /* the service thread finds ids by it */
    bool own_cqs;               /* rdma_create_qp made the CQs (and channels) */
    uint64_t connect_deadline_ns;   /* active: the TCP connect; child: its REQ */
    int events_out;             /* reported, not yet acked */
    bool destroying;
    struct ibv_sa_path_rec path;
    /* rdma_create_ep on a listener: the QP each request's id gets */
    bool ep_qp;
    struct ibv_pd *ep_pd;
    struct ibv_qp_init_attr ep_attr;
    struct cm_id *next_all;     /* every live id, for the service thread */
};

struct cm_event {
    struct rdma_cm_event pub;
    struct cm_id *owner;        /* whose events_out it counts in */
    uint8_t pdata[CM_PDATA_MAX];
    struct cm_event *next;
};

static inline struct cm_id *cm_id_of(struct rdma_cm_id *id) { return (struct cm_id *)id; }

/* ---- across the files --------------------------------------------------------- */

extern pthread_mutex_t cm_lock;
extern pthread_cond_t cm_cond;      /* events acked, ids changed */

/* cm_debug: TBRT_DEBUG text; errno set, -1 returned */
int cm_fail(const char *call, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cm_say(const char *call, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* cm_wire.c */
size_t cm_encode_info(uint8_t *out, enum cm_type type, const struct cm_conn_info *info);
size_t cm_encode_empty(uint8_t *out, enum cm_type type);
size_t cm_encode_rej(uint8_t *out, uint8_t reason, const void *pdata, uint8_t len);
/* Bytes of the message at the start of rx, 0 if incomplete, -1 malformed
 * (why says how). */
long cm_complete(const struct cm_rx *rx, char *why, size_t whylen);
/* Decode a complete message; 0 or -1 (why). */
int cm_decode(const uint8_t *msg, size_t len, enum cm_type *type, struct cm_conn_info *info,
              uint8_t *rej_reason, char *why, size_t whylen);
/* Send all of buf on a non-blocking socket (bounded wait); 0 or -errno. */
int cm_send(int sock, const uint8_t *buf, size_t len);

/* cm_events.c (cm_lock held) */
struct cm_event *cm_event_new(struct cm_id *id, enum rdma_cm_event_type type, int status);
void cm_queue(struct cm_chan *ch, struct cm_event *e);
struct cm_chan *cm_chan_new(bool sync);
void cm_chan_free(struct cm_chan *ch);
void cm_chan_drop(struct cm_chan *ch, struct cm_id *id);
/* Synchronous ids: wait (cm_lock released meanwhile) for the next event of
 * the id's private channel; its type, or -1 with errno. */
int cm_sync_wait(struct cm_id *id, enum rdma_cm_event_type want, int timeout_ms);

/* cm_id.c */
struct cm_dev *cm_devs(int *n);
void cm_link(struct cm_id *id);
void cm_unlink(struct cm_id *id);
struct cm_id *cm_first_id(void);
/* Close and free an id nobody holds (cm_lock held). */
void cm_free_id(struct cm_id *id);
/* A listener keeps at most this many connections that have not yet sent
 * their REQ (the oldest makes room for a new one), each for at most
 * CM_CONNECT_TIMEOUT_MS: a peer cannot make it hold more. */
#define CM_PENDING_MAX 64
/* Find our device, port and GID for a local address; 0 or -errno. */
int cm_bind_local(struct cm_id *id, const struct sockaddr *addr);
void cm_fill_route(struct cm_id *id);

/* cm_conn.c */
/* The peer's REQ/REP/... arrived on id's socket (service thread, locked). */
void cm_handle(struct cm_id *id, enum cm_type type, const struct cm_conn_info *info,
               uint8_t rej_reason);
/* The connection ended (EOF, error, or a malformed message). */
void cm_conn_lost(struct cm_id *id, int err, const char *why);
/* A non-blocking connect finished (err 0) or failed. */
void cm_connected(struct cm_id *id, int err);
/* A TCP connection came in on a listener. */
void cm_incoming(struct cm_id *listener, int sock);
/* rdma_get_cm_event's work on the active side's reply. */
void cm_process_reply(struct cm_event *e);

/* cm_service.c */
/* Start the service thread once; watch (or stop watching) id's socket. */
int cm_service_watch(struct cm_id *id, bool writable);
void cm_service_forget(struct cm_id *id);
/* RoCE defaults of the kernel's CM (as rdma_init_qp_attr reports them) */
#define CM_MIN_RNR_TIMER 12
#define CM_ACK_TIMEOUT 14
#define CM_HOP_LIMIT 64

/* Connect deadlines are checked once a while */
#define CM_CONNECT_TIMEOUT_MS 5000

#endif
