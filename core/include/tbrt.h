/* tbrt.h - the public C API of the tbrt core.
 *
 * Two tiers, one header:
 *   - the verbs tier (tbrt_dev_*, tbrt_pd_*, tbrt_cq_*, tbrt_qp_*, tbrt_mr_*,
 *     tbrt_post_*): a verbs-shaped device API over every device tbrt has
 *     (soft, ibverbs, mlx5), using <infiniband/verbs.h> types, so scripts can
 *     drive a device directly and provoke each platform rule on purpose;
 *   - the link tier (tbrt_link_*): the transport engine (stride rings, framed
 *     strides, coalescing send, byte-stream recv, readiness, liveness) on top.
 *
 * Conventions: calls return 0 (or a count) on success and a negative errno on
 * failure; the detail of the last failure is a message on the object
 * (tbrt_dev_why, tbrt_link_why) that names the object, the operation and the
 * cause. Nothing here calls back into the caller: it polls (pull style).
 *
 * bindings/gen_cdef.lua turns this header into the LuaJIT ffi.cdef module, so
 * everything between the cdef markers must stay plain declarations. */
#ifndef TBRT_H
#define TBRT_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tbrt:cdef begin */

/* ---- library ---------------------------------------------------------- */

/* Bumped on any incompatible change of this header. The bindings also check
 * tbrt_header_hash() against the hash recorded in the generated cdef. */
enum { TBRT_ABI_VERSION = 6 };  /* 2: link stats inline_sends; 3: link opts stall,
                                   no_fallback, link info fallback; 4: SRQs, events,
                                   user pointers, iova, completion timestamps;
                                   5: registered memory, direct link stats;
                                   6: link opts no_eager, eager link stats */

int tbrt_abi_version(void);
const char *tbrt_version(void);
const char *tbrt_header_hash(void);
/* "ECONNRESET" for ECONNRESET etc.; "E<number>" when unknown. */
const char *tbrt_errname(int err);

/* ---- debug output ----------------------------------------------------- */

/* TBRT_DEBUG=0..3, read once when the library loads (as GGML_RPC_DEBUG):
 * 0 nothing; 1 events (a link probed, ready, staying on TCP, broken, timed
 * out, closed); 2 every operation (each send/recv/flush that moved bytes,
 * each blocking call with its result and time); 3 every frame (each stride
 * posted, arrived or completed, each tcp write/read, with byte counts and
 * times). Lines go to stderr, each "tbrt: link N: ..." ("tbrt: ..." when
 * about no link). Off, it costs one branch on the cached level. */
int tbrt_debug_level(void);
/* Change the level at run time (clamped to 0..3); returns the old one. */
int tbrt_debug_set(int level);
/* Write msg as a debug line when level <= the current level, prefixed as
 * the core's own ("tbrt: link N: msg"; link_id 0: "tbrt: msg"), for
 * callers above the core (the Lua library) to log through. */
void tbrt_debug_log(int level, int link_id, const char *msg);

/* ---- devices ---------------------------------------------------------- */

enum {
    TBRT_NAME_MAX = 64,
    TBRT_WHY_MAX = 512,
    TBRT_CAPS_SIZE = 24,
};

/* What a device is like, which decides the engine's defaults:
 * APPLE: UC queue pairs, fixed strides, receives posted after RTS, Apple caps.
 * LINUX: RC queue pairs, variable strides, receives posted at INIT, Linux caps. */
enum tbrt_flavor {
    TBRT_FLAVOR_APPLE = 1,
    TBRT_FLAVOR_LINUX = 2,
};

typedef struct tbrt_devinfo {
    char name[64];        /* "soft0", "mlx5_0", "rdma_en6", "mlx5:model0" */
    char kind[16];        /* "soft", "ibverbs", "mlx5" */
    char personality[16]; /* soft: "apple-uc" / "linux-rc"; others: "" */
    int flavor;           /* enum tbrt_flavor */
    int usable;           /* 0: listed only to say why it cannot be used */
    char why[512];        /* reason when not usable */
} tbrt_devinfo;

/* Every device tbrt can see, usable or not, in selection order. Fills at most
 * max entries and returns how many there are (may exceed max). */
int tbrt_devices(tbrt_devinfo *out, int max);

typedef struct tbrt_dev tbrt_dev;
typedef struct tbrt_pd tbrt_pd;
typedef struct tbrt_cq tbrt_cq;
typedef struct tbrt_qp tbrt_qp;
typedef struct tbrt_mr tbrt_mr;
typedef struct tbrt_ah tbrt_ah;
typedef struct tbrt_srq tbrt_srq;

/* Options for opening a device; unset fields (NULL / 0) take the
 * environment (TBRT_SOFT_PERSONALITY, TBRT_SOFT_PORTS...) or the default. */
typedef struct tbrt_dev_opts {
    const char *personality; /* soft: "apple-uc" | "linux-rc" */
    const char *ports;       /* soft: port states, e.g. "down,active" */
    const char *pci;         /* mlx5: PCI address; NULL = the device model */
    int trace;               /* mlx5: print every command (mlx5_core format) */
    const char *wire;        /* soft: "auto" | "shm" | "udp" ($TBRT_SOFT_WIRE, else auto) */
    const char *faults;      /* soft: fault sets ($TBRT_FAULTS's syntax) */
    const char *pcap;        /* soft, UDP wire: capture file ($TBRT_PCAP) */
} tbrt_dev_opts;

/* The public part of each object; devices embed these as first member. */
struct tbrt_pd {
    tbrt_dev *dev;
    uint32_t handle;
};
struct tbrt_cq {
    tbrt_dev *dev;
    int cqe;             /* capacity */
    int fd;              /* completion fd: readable after an armed event */
    void *user;          /* the caller's (tbrt never reads it) */
};
struct tbrt_qp {
    tbrt_dev *dev;
    tbrt_pd *pd;
    uint32_t qp_num;
    int qp_type;         /* enum ibv_qp_type */
    int state;           /* enum ibv_qp_state, as last set (or as an error set it) */
    tbrt_cq *send_cq;
    tbrt_cq *recv_cq;
    struct ibv_qp_cap cap;
    tbrt_srq *srq;       /* receives come from it (NULL: the QP's own queue) */
    void *user;          /* the caller's (tbrt never reads it) */
};
struct tbrt_mr {
    tbrt_dev *dev;
    tbrt_pd *pd;
    void *addr;
    size_t length;
    uint32_t lkey;
    uint32_t rkey;
    int access;
    uint64_t iova;       /* what SGEs and remote addresses call addr (= addr unless
                            registered with tbrt_mr_reg_iova) */
};
/* A shared receive queue: QPs made with it take their receives from it. */
struct tbrt_srq {
    tbrt_dev *dev;
    tbrt_pd *pd;
    uint32_t srq_num;
    void *user;          /* the caller's (tbrt never reads it) */
};
struct tbrt_ah {
    tbrt_dev *dev;
    tbrt_pd *pd;
    struct ibv_ah_attr attr;
};

int tbrt_dev_open(const char *name, const tbrt_dev_opts *opts, tbrt_dev **out,
                  char *err, size_t errlen);
int tbrt_dev_close(tbrt_dev *dev);
const char *tbrt_dev_name(tbrt_dev *dev);
const char *tbrt_dev_kind(tbrt_dev *dev);
const char *tbrt_dev_personality(tbrt_dev *dev);
int tbrt_dev_flavor(tbrt_dev *dev);
/* Detail of the device's last failure (or last error completion). */
const char *tbrt_dev_why(tbrt_dev *dev);
/* Text for a completion's vendor_err, device specific ("" when none). */
const char *tbrt_dev_vendor_err(tbrt_dev *dev, uint32_t vendor_err);

int tbrt_dev_query(tbrt_dev *dev, struct ibv_device_attr *attr);
int tbrt_port_query(tbrt_dev *dev, uint8_t port, struct ibv_port_attr *attr);
/* Take a port DOWN or back ACTIVE at run time, as a pulled or plugged cable
 * would (fault injection; soft devices: seen by every process on the host
 * until the setting process exits; state 0 restores the configured state).
 * -EOPNOTSUPP on devices that cannot. */
int tbrt_port_set_state(tbrt_dev *dev, uint8_t port, int state);
/* Replace the device's fault sets (soft devices; TBRT_FAULTS's syntax,
 * "drop=1%,delay=200us,seed=7", "" clears): 0, -EINVAL with the reason in
 * tbrt_dev_why, -EOPNOTSUPP on devices without fault injection. */
int tbrt_dev_faults(tbrt_dev *dev, const char *spec);
/* The device's counters (packets sent/received, retransmits, NAKs, ...), of
 * one queue pair when qpn != 0: up to max names and values; returns how
 * many (0 on devices without counters). */
int tbrt_dev_counters(tbrt_dev *dev, uint32_t qpn, const char **names, uint64_t *values,
                      int max);
/* One line on how the device moves data ("wire udp, port 4791, ..."), or "". */
const char *tbrt_dev_describe(tbrt_dev *dev);
/* A GID entry with its type; the type is -EOPNOTSUPP'd on providers that do
 * not know types (Apple): then gid_type is set to IBV_GID_TYPE_IB and the
 * call returns 1 instead of 0. An empty entry gives -ENODATA. */
int tbrt_gid_query(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *entry);

int tbrt_pd_alloc(tbrt_dev *dev, tbrt_pd **out);
int tbrt_pd_free(tbrt_pd *pd);

int tbrt_cq_create(tbrt_dev *dev, int cqe, tbrt_cq **out);
int tbrt_cq_destroy(tbrt_cq *cq);
int tbrt_cq_poll(tbrt_cq *cq, int n, struct ibv_wc *wc);
/* As tbrt_cq_poll, with the time each completion was made in ts_ns[i]
 * (CLOCK_MONOTONIC nanoseconds: when the work finished, on the soft device;
 * the time of the poll on devices that cannot say). */
int tbrt_cq_poll_ts(tbrt_cq *cq, int n, struct ibv_wc *wc, uint64_t *ts_ns);
/* Arm: the next completion makes cq->fd readable. */
int tbrt_cq_arm(tbrt_cq *cq);
/* Consume the events that made cq->fd readable; returns how many. */
int tbrt_cq_ack(tbrt_cq *cq);

/* ibv_qp_init_attr with tbrt completion queues. */
typedef struct tbrt_qp_init {
    tbrt_cq *send_cq;
    tbrt_cq *recv_cq;
    struct ibv_qp_cap cap;   /* in: requested; out: granted (max_recv_wr/sge 0 with an SRQ) */
    int qp_type;             /* IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD */
    int sq_sig_all;
    tbrt_srq *srq;           /* NULL: the QP has its own receive queue */
} tbrt_qp_init;

int tbrt_qp_create(tbrt_pd *pd, tbrt_qp_init *init, tbrt_qp **out);
int tbrt_qp_modify(tbrt_qp *qp, struct ibv_qp_attr *attr, int mask);
int tbrt_qp_destroy(tbrt_qp *qp);

int tbrt_mr_reg(tbrt_pd *pd, void *addr, size_t length, int access, tbrt_mr **out);
/* As tbrt_mr_reg, but SGEs and remote addresses name the region as
 * [iova, iova + length) (ibv_reg_mr_iova2). */
int tbrt_mr_reg_iova(tbrt_pd *pd, void *addr, size_t length, uint64_t iova, int access,
                     tbrt_mr **out);
int tbrt_mr_dereg(tbrt_mr *mr);

int tbrt_ah_create(tbrt_pd *pd, struct ibv_ah_attr *attr, tbrt_ah **out);
int tbrt_ah_destroy(tbrt_ah *ah);
/* Address handle for a UD send: wr.wr.ud.ah takes tbrt_ah_handle(ah). */
struct ibv_ah *tbrt_ah_handle(tbrt_ah *ah);

int tbrt_post_send(tbrt_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int tbrt_post_recv(tbrt_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* Shared receive queues. attr: in, max_wr, max_sge and srq_limit asked;
 * out, granted. modify: IBV_SRQ_MAX_WR (within what it was made with) and
 * IBV_SRQ_LIMIT (arms the limit: IBV_EVENT_SRQ_LIMIT_REACHED once fewer
 * receives wait, then disarmed; 0 disarms). */
int tbrt_srq_create(tbrt_pd *pd, struct ibv_srq_attr *attr, tbrt_srq **out);
int tbrt_srq_modify(tbrt_srq *srq, struct ibv_srq_attr *attr, int mask);
int tbrt_srq_query(tbrt_srq *srq, struct ibv_srq_attr *attr);
int tbrt_srq_destroy(tbrt_srq *srq);
int tbrt_post_srq_recv(tbrt_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* Asynchronous events (libibverbs' ibv_async_event): port state changes
 * (also made by another process's tbrt_port_set_state), a QP in error
 * (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR), COMM_EST, QP_LAST_WQE_REACHED, a CQ
 * overrun (CQ_ERR), SRQ_LIMIT_REACHED and SRQ_ERR. */
typedef struct tbrt_event {
    enum ibv_event_type type;
    tbrt_qp *qp;             /* QP events */
    tbrt_cq *cq;             /* CQ_ERR */
    tbrt_srq *srq;           /* SRQ events */
    uint32_t num;            /* the QP's or SRQ's number */
    int port;                /* port events */
} tbrt_event;
/* An fd that turns readable when tbrt_dev_event may have one; -EOPNOTSUPP
 * on devices without events. */
int tbrt_dev_event_fd(tbrt_dev *dev);
/* The oldest event not yet taken: 1 with it in *ev, 0 when there is none
 * (the fd is quiet again until there is). Gives the device a turn. */
int tbrt_dev_event(tbrt_dev *dev, tbrt_event *ev);

/* ---- caps ------------------------------------------------------------- */

/* The 24-byte blob exchanged at setup, in the layouts llama.cpp's RPC uses
 * (little endian):
 *   Apple: qpn u32, lid u16, reserved u16, gid[16]
 *   Linux: qpn u32, psn u32, gid[16]
 * All zero means "no RDMA here, stay on TCP". */
typedef struct tbrt_caps {
    int flavor;          /* enum tbrt_flavor; 0 = none (all zero) */
    uint32_t qpn;
    uint32_t psn;        /* Linux */
    uint16_t lid;        /* Apple */
    uint8_t gid[16];
} tbrt_caps;

int tbrt_caps_encode(const tbrt_caps *caps, uint8_t *out, size_t outlen);
/* Decode a blob of len bytes as the given flavor. Returns 0, or 1 for the
 * all-zero blob (caps->flavor = 0), or -EINVAL with the reason in err. */
int tbrt_caps_decode(const uint8_t *blob, size_t len, int flavor, tbrt_caps *caps,
                     char *err, size_t errlen);

/* ---- links ------------------------------------------------------------ */

/* How a link frames its bytes on the wire and what it says on the bootstrap
 * socket. AUTO, FIXED and VARIABLE are tbrt's own framing (16-byte header,
 * readiness byte, goodbye byte); the LLAMA ones are llama.cpp's ggml-rpc
 * RDMA transports byte for byte, so a tbrt link can be either end of a
 * llama.cpp link:
 *   LLAMA_APPLE  16 strides of 128 KiB per direction, an 8-byte header
 *                {magic "RSEG", len}, whole strides posted, PSN 0,
 *                receives after RTS, the readiness byte, no goodbye byte;
 *                UC on Apple devices as llama.cpp, RC on devices without
 *                TN3205's credit flow control (UC would drop frames there);
 *   LLAMA_LINUX  no header: each send is cut into SENDs of at most 256 KiB,
 *                one at a time (stop-and-wait), up to 256 bytes inline;
 *                24 receives of 256 KiB posted at INIT; RC on port 1;
 *                psn = qpn & 0xffffff; no readiness byte, no goodbye byte.
 * Once a llama link is up, anything on its bootstrap socket means the peer
 * is gone (EOF ends the link: llama.cpp closes without a word). */
enum tbrt_framing {
    TBRT_FRAMING_AUTO = 0,     /* tbrt's own: FIXED on Apple devices, VARIABLE on Linux */
    TBRT_FRAMING_FIXED = 1,    /* every SEND posts the whole stride (TN3205) */
    TBRT_FRAMING_VARIABLE = 2, /* a SEND posts only the filled bytes */
    TBRT_FRAMING_LLAMA_APPLE = 3, /* llama.cpp's Apple (TN3205, UC) transport */
    TBRT_FRAMING_LLAMA_LINUX = 4, /* llama.cpp's Linux (RC) transport */
};

enum {
    TBRT_STRIDE_HDR = 16,      /* bytes of tbrt's header at the start of a stride */
    TBRT_SEG_MAGIC = 0x54524254, /* "TBRT" as it lies in memory: tbrt's own header */
    TBRT_LLAMA_SEG_MAGIC = 0x52534547, /* "RSEG": llama.cpp's Apple header */
    TBRT_LLAMA_APPLE_HDR = 8,  /* {magic, len} */
    TBRT_LLAMA_LINUX_CHUNK = 262144, /* 256 KiB: llama.cpp's Linux SEND and receive size */
    TBRT_READY_BYTE = 0x2A,    /* readiness handshake byte (tbrt and llama-apple) */
    TBRT_BYE_BYTE = 0x2B,      /* sent on an orderly close (tbrt framing only) */
};

typedef struct tbrt_link_opts {
    const char *device;      /* "soft", "soft0", "ibverbs", "mlx5", "tcp", "auto";
                                NULL: $TBRT_DEVICE, else "soft" */
    const char *personality; /* soft devices; NULL: $TBRT_SOFT_PERSONALITY */
    const char *ports;       /* soft devices; NULL: $TBRT_SOFT_PORTS */
    const char *pci;         /* mlx5 devices */
    int gid_index;           /* -1: match the bootstrap address ($TBRT_GID_INDEX) */
    int port;                /* 0: first ACTIVE port */
    uint32_t nbuf;           /* strides per direction (16) */
    uint32_t stride;         /* bytes per stride (128 KiB), a multiple of 4 KiB */
    int framing;             /* enum tbrt_framing; the LLAMA ones fix nbuf and stride,
                                LLAMA_LINUX also RC and port 1 */
    int qp_type;             /* 0: by flavor (UC on Apple, RC on Linux) */
    double timeout;          /* bound of every blocking call, seconds (30) */
    double liveness;         /* a peer gone (process dead: EOF; host dead: no TCP
                                keepalive or acknowledgement answered) is reported
                                within this, seconds (2); it breaks the link */
    double spin;             /* busy-poll this long before sleeping, seconds; < 0 (the
                                default): 50e-6 on RDMA links, 0 on tcp (set it to
                                busy-poll a tcp link's socket too) */
    int trace;               /* mlx5 command trace */
    double stall;            /* a peer alive but not progressing: a send that moves
                                nothing for this long fails with ETIMEDOUT "peer alive
                                but not progressing" (the link stays usable);
                                0: only the call's timeout bounds it (default) */
    int no_fallback;         /* tbrt_link_connect/accept: fail when no RDMA device
                                can be used here instead of falling back to TCP */
    const char *wire;        /* soft devices: "auto" | "shm" | "udp"; NULL: $TBRT_SOFT_WIRE */
    const char *faults;      /* soft devices: fault sets; NULL: $TBRT_FAULTS */
    const char *pcap;        /* soft devices, UDP wire: capture file; NULL: $TBRT_PCAP */
    int no_eager;            /* 1: every frame a SEND, no eager frames (small frames
                                RDMA-written into the peer's slots where both ends'
                                devices place writes in order; README); also
                                $TBRT_EAGER=0 */
} tbrt_link_opts;

typedef struct tbrt_link tbrt_link;

typedef struct tbrt_link_stats {
    uint64_t bytes_sent;
    uint64_t bytes_recv;
    uint64_t frames_sent;
    uint64_t frames_recv;
    uint64_t completions;
    uint64_t spins;          /* progress calls that found nothing */
    uint64_t sleeps;         /* times a waiter armed and slept on the fds */
    uint64_t eagain;         /* non-blocking calls that returned -EAGAIN */
    uint64_t inline_sends;   /* SENDs posted with IBV_SEND_INLINE (llama-linux) */
    uint64_t recv_posted;    /* receives the device holds now (RDMA): a drained
                                stride goes back when the link next finds
                                nothing to do, or 8 (nbuf/4 + 1) at a time */
    uint64_t cpu_moves;      /* times a waiter that found its peer waiting on
                                its own CPU moved itself to another one */
    uint64_t direct_sends;   /* sends from registered memory the peer read
                                itself (tbrt_link_mem_reg) */
    uint64_t direct_recvs;   /* the peer's direct sends read to the end */
    uint64_t direct_bytes;   /* of those, bytes read straight into registered
                                memory (the rest came through a stride) */
    uint64_t fellow_yields;  /* times a waiter yielded its CPU to another tbrt
                                waiter (of this user) spinning on the same CPU */
    uint64_t eager_sends;    /* small frames RDMA-written into the peer's eager
                                slots instead of sent (README: eager frames) */
    uint64_t eager_recvs;    /* frames taken from our eager slots */
    uint64_t eager_wakes;    /* empty SENDs that woke a peer asleep while its
                                eager slots filled */
} tbrt_link_stats;

enum tbrt_link_state {
    TBRT_LINK_PROBED = 1,    /* resources made, caps known */
    TBRT_LINK_ACTIVATING,    /* queue pair up, readiness byte sent */
    TBRT_LINK_READY,         /* both sides ready: data may flow */
    TBRT_LINK_BROKEN,        /* failed; tbrt_link_why says why */
    TBRT_LINK_CLOSED,
};

typedef struct tbrt_link_info {
    int id;                  /* "link 3" in every message */
    int state;               /* enum tbrt_link_state */
    int flavor;
    int framing;
    int qp_type;
    char device[64];         /* "soft0", "tcp", ... */
    char kind[16];
    char personality[16];
    int port;
    int gid_index;
    uint32_t qpn;
    uint32_t peer_qpn;
    uint32_t nbuf;
    uint32_t stride;
    char why_device[512];    /* how the device, port and GID were chosen */
    char fallback[256];      /* "" unless an RDMA link stays on TCP, then why:
                                "peer has no RDMA: staying on TCP", or
                                "no usable RDMA device here: staying on TCP (...)" */
} tbrt_link_info;

void tbrt_link_opts_init(tbrt_link_opts *opts);

/* Choose the device, port and GID facing the peer of bootstrap_fd (a
 * connected TCP socket; the link takes it over and closes it at the end),
 * create the queue pair and register the rings. caps_out gets this side's
 * 24-byte caps (all zero for the tcp link).
 *
 * The link makes the socket non-blocking (O_NONBLOCK; also TCP_NODELAY and
 * keepalive from opts.liveness), on success and from then on: a caller that
 * exchanges the caps over it itself must poll() for EAGAIN. On failure the
 * caller keeps its socket (possibly non-blocking by then). The helpers
 * below (tbrt_link_connect / tbrt_link_accept) do all of it. */
int tbrt_link_probe(int bootstrap_fd, const tbrt_link_opts *opts, tbrt_link **out,
                    uint8_t *caps_out, char *err, size_t errlen);

/* Connect to the peer (RESET->INIT->RTR->RTS, post the receives) and send
 * the readiness byte; non-blocking. A failure still tells the peer (it gets
 * a 0 byte instead of 0x2A) so both sides fail together. */
int tbrt_link_activate(tbrt_link *l, const uint8_t *peer_caps, size_t len);
/* Read the peer's readiness byte: 0 when ready, -EAGAIN while waiting. */
int tbrt_link_ready(tbrt_link *l);
/* Both of the above, blocking, bounded by opts.timeout. */
int tbrt_link_activate_wait(tbrt_link *l, const uint8_t *peer_caps, size_t len);

/* Non-blocking data path. send returns the bytes accepted (maybe fewer than
 * len) or -EAGAIN when every stride is in flight; recv returns the bytes
 * copied (>0), -EAGAIN when none have arrived, or an error. On a broken
 * link recv first hands out what arrived before the failure, then the
 * link's error. */
intptr_t tbrt_link_send(tbrt_link *l, const void *buf, size_t len);
intptr_t tbrt_link_recv(tbrt_link *l, void *buf, size_t len);
/* Post the partly filled stride (call at every message boundary): 0, or
 * -EAGAIN when it cannot go yet (every stride's send in flight; tcp: the
 * socket's buffer is full, the peer not reading fast enough), then progress
 * and flush again (or tbrt_link_flush_all), or an error. */
int tbrt_link_flush(tbrt_link *l);
/* Reap completions and check liveness; returns completions reaped. */
int tbrt_link_progress(tbrt_link *l);

/* Register the caller's memory with an RDMA link (after probe): a send of
 * 32 KiB or more from it is not copied into the send ring but offered to
 * the peer, which reads it with RDMA READs, into its own registered memory
 * directly (one copy instead of three) or through a stride. Such a send
 * returns -EAGAIN until the peer has read all of it, and the buffer is lent
 * to the peer until then: call send again with the same buffer (send_all
 * does) and change nothing in it; another buffer gets -EBUSY. (A call
 * after the peer gave the offer back, below, sends the bytes through the
 * ring and returns how many it took, as any send.) A rendezvous,
 * then: of two ends that both send this way before reading, the one with
 * the lower QPN takes its offer back (unless the peer began reading it)
 * and sends through the rings, so the exchange completes as one from
 * plain memory would, within what the rings hold. Up to 8
 * regions per link; on a soft device registering moves the pages into
 * shared memory (a copy), so register once and reuse. A recv that meets an
 * offer returns -EAGAIN while its READ is in flight (readable is 0 then);
 * the next recv goes on. Direct transfers need RC, tbrt's variable framing
 * and a device that posts READs (not tbrt's mlx5 driver yet): elsewhere
 * sends stay on the link's own path, and over tcp and llama-linux this
 * does nothing and returns 0. 0 or -errno (-EEXIST, -ENOSPC, the device's
 * error, with tbrt_link_why). */
int tbrt_link_mem_reg(tbrt_link *l, void *addr, size_t len);
/* Undo it (the address given to mem_reg): -ENOENT, or -EBUSY while a send
 * from it is lent or a READ into it is not yet taken by a recv. */
int tbrt_link_mem_dereg(tbrt_link *l, void *addr);

/* Blocking variants, each bounded by timeout seconds (< 0: opts.timeout). */
intptr_t tbrt_link_send_all(tbrt_link *l, const void *buf, size_t len, double timeout);
intptr_t tbrt_link_recv_all(tbrt_link *l, void *buf, size_t len, double timeout);
intptr_t tbrt_link_recv_some(tbrt_link *l, void *buf, size_t len, double timeout);
/* tbrt_link_flush until what was sent is posted (tcp: written to the
 * socket): 0, -ETIMEDOUT (saying so), or the link's error. */
int tbrt_link_flush_all(tbrt_link *l, double timeout);
/* tbrt_link_recv, looking again (each look a turn of progress, as a recv
 * that finds nothing takes) up to `looks` more times while nothing came;
 * never sleeps (on the tcp link, whose look is a system call, it looks
 * once), and counts one -EAGAIN in stats. For callers whose own wait
 * loop costs more than a look: the Lua binding spins here first, so a
 * message that comes within a few looks is found without leaving C. */
intptr_t tbrt_link_recv_looking(tbrt_link *l, void *buf, size_t len, unsigned looks);

/* ---- zero-copy views -------------------------------------------------- */

/* Views hand out the link's own ring memory instead of copying through a
 * caller's buffer (core/engine/views.c has the whole contract):
 *
 * send_view: a writable span at the end of the stride being filled; returns
 *   its length (>0), -EAGAIN when every stride is in flight, or an error.
 *   want = 0 asks for all the room the stride has. The span is at most
 *   min(want, room left in the stride) and never crosses strides: it is at
 *   most the stride payload (stride - 16 bytes in tbrt's framing, - 8 in
 *   llama-apple), 256 KiB (one SEND) in llama-linux and on tcp. For more,
 *   commit and ask again; for a span of exactly want contiguous bytes that
 *   did not fit, flush() and ask again (a fresh stride).
 * commit: sends the first n bytes of the open send view (n <= its length;
 *   n = 0 sends nothing) and closes it; the rest of the span is given back
 *   (the next view starts right after the committed bytes). A full stride
 *   is posted; flush() posts a partly filled one, as after send(). On
 *   llama-linux each commit is one SEND (a message boundary there).
 * recv_view: a read-only span of the oldest received stride's unread bytes:
 *   its length (>0), 0 at EOF, -EAGAIN when nothing has arrived, or an
 *   error. An open recv view is released (all of it) first.
 * release: gives back the first n bytes of the open recv view (n <= its
 *   length; the rest stays for the next recv/recv_view) and closes it; a
 *   drained stride goes back to the device.
 * One send view and one recv view may be open at a time (together). While
 * a send view is open, send/flush/send_view fail with -EINVAL; while a recv
 * view is open, recv fails with -EINVAL (each with a message in
 * tbrt_link_why). A view stays valid, also when the link breaks, until
 * commit/release/the next view call; a view left open at close keeps its
 * addresses reserved (fresh zero pages), so a late access cannot touch
 * another object's memory. *out is written only when a view is given. */
intptr_t tbrt_link_send_view(tbrt_link *l, size_t want, uint8_t **out);
int tbrt_link_commit(tbrt_link *l, size_t n);
intptr_t tbrt_link_recv_view(tbrt_link *l, const uint8_t **out);
int tbrt_link_release(tbrt_link *l, size_t n);
/* Blocking variants, bounded by timeout seconds (< 0: opts.timeout). */
intptr_t tbrt_link_send_view_wait(tbrt_link *l, size_t want, uint8_t **out, double timeout);
intptr_t tbrt_link_recv_view_wait(tbrt_link *l, const uint8_t **out, double timeout);

/* For an event loop: the fds to watch for readability while waiting
 * (completion fd, bootstrap socket); returns how many. */
int tbrt_link_fds(tbrt_link *l, int *fds, int max);
/* Arm completion events before sleeping on the fds. Returns 1 when there is
 * already work (do not sleep), 0 when armed, or an error. */
int tbrt_link_arm(tbrt_link *l);
/* The longest the caller may sleep on the fds before calling progress
 * again (seconds), or -1 for no limit: sends in flight on a software device
 * need the caller's calls to move. */
double tbrt_link_sleep_max(tbrt_link *l);
/* For an event loop that waits itself, after a look (progress) that found
 * nothing: pauses as fits where the peer is (when it waits on this CPU, the
 * calling thread moves to another CPU of its affinity mask, which is then
 * restored; where it cannot, the CPU is yielded to the peer; when another
 * tbrt waiter of this user spins on this CPU and the link found nothing for
 * 20 us, the CPU is yielded, stats fellow_yields) and returns
 * how long (s) since the link's last progress the waiter should keep
 * looking before it arms and sleeps. */
double tbrt_link_idle(tbrt_link *l);
/* Would a call stop waiting now? what: TBRT_WAIT_RECV (bytes, EOF or an
 * error to report), TBRT_WAIT_SEND (room in the ring, or an error),
 * TBRT_WAIT_IDLE (no sends in flight, or an error). 1 yes, 0 no. Lets an
 * event loop wait without calling recv/send to find out. */
enum { TBRT_WAIT_RECV = 1, TBRT_WAIT_SEND = 2, TBRT_WAIT_IDLE = 3 };
int tbrt_link_ready_for(tbrt_link *l, int what);
/* For a caller that waits itself (an event loop) and ran out of time:
 * record the message a blocking call would give (what: TBRT_WAIT_RECV,
 * _SEND or _IDLE; done of len bytes within timeout seconds), saying what to
 * check: e.g. that this end's own bytes are still unflushed or not taken,
 * or that the peer is alive but sent nothing (a send it did not flush?).
 * Returns -ETIMEDOUT; the link stays usable. */
int tbrt_link_timed_out(tbrt_link *l, int what, size_t done, size_t len, double timeout);
/* Sends still in flight (posted, not completed; bytes not yet written on
 * the tcp link). An orderly close waits for 0 first. */
int tbrt_link_inflight(tbrt_link *l);
/* 1 when a send would accept bytes now, 0 when not. */
int tbrt_link_writable(tbrt_link *l);
/* Bytes that recv would return now without waiting. */
size_t tbrt_link_readable(tbrt_link *l);

void tbrt_link_set_timeouts(tbrt_link *l, double timeout, double liveness, double spin);
void tbrt_link_stats_get(tbrt_link *l, tbrt_link_stats *stats);
void tbrt_link_info_get(tbrt_link *l, tbrt_link_info *info);
const char *tbrt_link_why(tbrt_link *l);
int tbrt_link_errno(tbrt_link *l);
/* The verbs objects of an RDMA link (NULL for tcp), for scripts that look
 * underneath: the device, queue pair and completion queue. */
tbrt_dev *tbrt_link_dev(tbrt_link *l);
tbrt_qp *tbrt_link_qp(tbrt_link *l);
tbrt_cq *tbrt_link_cq(tbrt_link *l);

/* Orderly close: flush, wait (bounded) for the last sends to complete, send
 * the goodbye byte, then tear down (QP first, then MRs, buffers, CQ, PD,
 * device) and close the bootstrap socket. Safe to call twice. */
int tbrt_link_close(tbrt_link *l);
/* Close if needed (without waiting for sends in flight), then free. */
void tbrt_link_free(tbrt_link *l);

/* Test hooks: corrupt the next outgoing frame's header on purpose, to prove
 * the receiver notices. what: 1 magic, 2 length, 3 skip a sequence number,
 * 4 repeat the previous sequence number (1-4: tbrt framing; llama-apple has
 * no sequence number, llama-linux no header: -EINVAL); 5 make the TCP
 * fallback's setup fail (out of memory) when the peer's caps turn out all
 * zero; direct transfers (RDMA links in variable framing): the next offer
 * names 6 a wrong key, 7 a length of 2^30 + 1, 8 an address range that
 * wraps, or 9 goes twice; 10 sends a done frame that answers no offer, at
 * once. */
int tbrt_link_inject(tbrt_link *l, int what);

/* The order close destroyed things in, e.g. "qp,mr,mr,buf,buf,cq,pd,dev"
 * ("" before close), so specs can check the teardown order. A step that
 * failed shows as "qp(failed)"; rings the device may still write into are
 * then released after the device ("...,dev,buf,buf"). */
const char *tbrt_link_teardown(tbrt_link *l);

/* ---- connecting: the quick start ---------------------------------------- */

/* What a helper below failed at: the errno and a message naming the object,
 * the step and the cause ("connect 10.0.0.2:7000: ECONNREFUSED ..."). */
typedef struct tbrt_error {
    int code;                /* positive errno; 0: no error */
    char msg[512];
} tbrt_error;

typedef struct tbrt_listener tbrt_listener;

/* A ready link to host:port (a name or an address, IPv4 or IPv6): TCP
 * connect, probe (falling back to the tcp link when no RDMA device can be
 * used here, unless opts.no_fallback), the default caps exchange (each side
 * sends its 24 bytes, then reads the peer's: what tbrt.connect and
 * tbrt.listen do in Lua, so C and Lua ends meet), activation and the
 * readiness byte. Each step is bounded by opts.timeout. NULL on failure,
 * with err filled. opts NULL: the defaults. */
tbrt_link *tbrt_link_connect(const char *host, int port, const tbrt_link_opts *opts,
                             tbrt_error *err);
/* Listen on host:port (host NULL or "": every interface, as perftest;
 * port 0: any free port, see tbrt_listener_port). opts are kept for the
 * links accepted. */
tbrt_listener *tbrt_link_listen(const char *host, int port, const tbrt_link_opts *opts,
                                tbrt_error *err);
/* Wait up to timeout seconds (< 0: opts.timeout) for a peer, then set the
 * link up as tbrt_link_connect does (each step bounded by opts.timeout). */
tbrt_link *tbrt_link_accept(tbrt_listener *srv, double timeout, tbrt_error *err);
int tbrt_listener_port(tbrt_listener *srv);
/* The listening socket, to poll for readability in an event loop. */
int tbrt_listener_fd(tbrt_listener *srv);
void tbrt_listener_close(tbrt_listener *srv);

/* tbrt:cdef end */

#ifdef __cplusplus
}
#endif
#endif /* TBRT_H */
