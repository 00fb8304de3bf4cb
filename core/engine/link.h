/* link.h - the engine's link object: one bootstrap TCP socket plus a
 * transport (transport/: rdma or tcp), which the engine owns and calls.
 * link.c holds what every link shares: options, states, errors, close;
 * wait.c waiting, liveness.c the socket as liveness anchor, select.c the
 * device facing the peer. */
#ifndef TBRT_LINK_H
#define TBRT_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "dev/dev.h"
#include "engine/transport/transport.h"
#include "engine/views.h"

/* tbrt_link_inject: the fallback's tcp setup fails (after the frame hooks 1..4) */
#define LINK_INJECT_FALLBACK_SETUP 5
/* and the direct transfers' (direct.c): the next offer's key, length or
 * address is wrong, or it goes twice; a done frame that answers no offer */
#define LINK_INJECT_OFFER_KEY 6
#define LINK_INJECT_OFFER_LEN 7
#define LINK_INJECT_OFFER_WRAP 8
#define LINK_INJECT_OFFER_TWICE 9
#define LINK_INJECT_STRAY_DONE 10
/* and the eager frames' (eager.c): the next eager frame claims more bytes
 * than a slot holds, or says we consumed frames the peer never wrote */
#define LINK_INJECT_EAGER_LEN 11
#define LINK_INJECT_EAGER_CREDIT 12
/* The event and link info text when the peer's caps are all zero. */
#define LINK_PEER_NO_RDMA "peer has no RDMA: staying on TCP"

struct tbrt_link {
    int id;
    int state;                  /* enum tbrt_link_state */
    int err;                    /* errno of the failure that broke it */
    char why[TBRT_WHY_MAX];
    const struct link_transport *t;
    tbrt_link_opts opts;
    char device_opt[TBRT_NAME_MAX], personality_opt[16], ports_opt[32], pci_opt[32];
    char wire_opt[16], faults_opt[512], pcap_opt[256]; /* soft devices */
    tbrt_link_info info;
    bool bye;                   /* the peer closed the link in order */
    bool fallback;              /* RDMA link that fell back to TCP */
    double last_live_check;
    double last_port_check;
    double last_ack_check;
    unsigned live_tick;
    double stall_since;         /* first send that found no room, 0: not stalled */
    double shared_cpu_since;    /* the peer waits on our CPU since, 0: it does not */
    uint8_t shared_moves;       /* moves off that CPU tried in this round of */
    uint32_t shared_round;      /* LINK_CPU_SHARED + LINK_CPU_TURNS (tbrt_link_idle) */
    unsigned idle_calls;        /* tbrt_link_idle's, to look at the table now and then */
    bool fellow_here;           /* another waiter spins on our CPU (cpu_waiters.h) */
    uint64_t idle_completions;  /* stats.completions when the idle time began */
    uint64_t idle_since_ns;     /* when looks began to find nothing, 0: not yet */
    unsigned blocked_tick;
    bool ready_sent;
    struct link_views views;    /* open zero-copy views (views.c) */
    struct xport x;             /* the transport's state (transport.h) */
};

/* Break the link: record the errno and a message "link N: <op>: ...";
 * returns -err. A broken link keeps its first error. */
int link_fail(tbrt_link *l, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A failure of one call that leaves the link usable (a timeout); -err. */
int link_note(tbrt_link *l, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Length of the "link N: " prefix of s, a message of l (0 if none). */
size_t link_prefix_len(const tbrt_link *l, const char *s);
/* Whether the link may be used for data now; 0, or -errno with a message.
 * Inline: every send, flush and recv asks, and a ready link answers at once
 * (the message's path is counted in instructions: scripts/bench/cost.sh). */
int link_not_usable(tbrt_link *l, const char *op);
static inline int link_usable(tbrt_link *l, const char *op)
{
    return __builtin_expect(l->state == TBRT_LINK_READY, 1) ? 0 : link_not_usable(l, op);
}
/* The copying calls while a view is open: 0, or views.c's refusal. */
static inline int views_busy_send(tbrt_link *l, const char *op)
{
    return __builtin_expect(l->views.send_open, 0) ? views_refuse_send(l, op) : 0;
}
static inline int views_busy_recv(tbrt_link *l, const char *op)
{
    return __builtin_expect(l->views.recv_open, 0) ? views_refuse_recv(l, op) : 0;
}

/* wait.c: spin, then sleep on the fds, until cond holds or timeout (s). */
typedef bool (*link_cond)(tbrt_link *l, void *arg);
int link_wait(tbrt_link *l, link_cond cond, void *arg, double timeout, bool writing);
int link_wait_idle(tbrt_link *l, double timeout);

/* A transport call's result: a failure the transport recorded (xport_fail)
 * becomes the link's error here, the one place it crosses over (inline: a
 * data call takes it once or twice, and it is nearly always rc >= 0). */
intptr_t link_took_failed(tbrt_link *l, intptr_t rc);
static inline intptr_t link_took(tbrt_link *l, intptr_t rc)
{
    return rc < 0 ? link_took_failed(l, rc) : rc;
}
/* The transport's progress, then the liveness check every 64th call. */
int link_progress(tbrt_link *l);
/* Bytes a flush has still to move: the stride being filled, or (tcp) the
 * coalesced bytes not yet in the socket. */
static inline size_t link_unflushed(const tbrt_link *l)
{
    return l->x.dev ? (l->x.pend_buf >= 0 ? l->x.pend_len : 0) : l->x.tcp_len;
}

/* liveness.c: the bootstrap socket as the liveness anchor */
int link_socket_setup(tbrt_link *l, char *err, size_t errlen);
void link_keepalive_apply(tbrt_link *l);
/* Look at the bootstrap socket without blocking: the goodbye byte, EOF or an
 * error mark the peer closed/dead. force: do it now, not rate-limited. */
int link_check_liveness(tbrt_link *l, bool force);
int link_send_byte(tbrt_link *l, uint8_t b);
/* tcp links: our bytes unacknowledged for the liveness bound mean the peer
 * host is gone (breaks the link); rate-limited. */
int link_check_tcp_acks(tbrt_link *l, double now);
/* 1 byte read, 0 would block, <0 error (EOF is -ECONNRESET). */
int link_recv_byte(tbrt_link *l, uint8_t *b);

/* How long a waiter busy-polls before it sleeps: opts.spin when set (>= 0),
 * else 50 us on RDMA links (a completion comes sooner than a wake-up) and 0
 * on tcp (the kernel wakes a reader as fast as spinning would, without
 * taking the core from its own network processing). Without opts.spin, an
 * RDMA waiter whose device says the peer process is awake (not asleep on
 * its completion queue) keeps looking for LINK_SPIN_AWAKE instead: on a
 * busy machine the peer loses its CPU for a scheduler slice now and then,
 * and a waiter that slept meanwhile is woken onto the waker's CPU, where
 * the two then take turns at tens of us a message (measured: 2 ms keeps
 * them apart under two busy loops; 50 us does not). A waiter whose peer
 * waits on its own CPU first moves itself to another CPU its affinity mask
 * allows (the end with the lower QPN; the other end too if they still share
 * LINK_CPU_SHARED later; both again each round, below), then gives the mask
 * back: a wake-up by a local
 * socket puts the wakee on its waker's CPU, and two tasks taking turns
 * there stay hot, which the scheduler is slow to part (tens of ms, measured
 * on 2 vCPUs). Where no move is possible it spins on, for LINK_CPU_SHARED:
 * the one of the two that does not run then goes cold, and the scheduler
 * moves cold tasks to another CPU (yielding to each other, both stay hot
 * and would stay together); after that they seem to share the CPU for good
 * (pinned, or one CPU), and each yields it to the other instead of
 * spinning, for LINK_CPU_TURNS, then spins again, in case the scheduler can
 * part them now. A waiter whose spin found nothing for LINK_YIELD_AFTER
 * while another tbrt waiter (not its peer) spins on its CPU yields the CPU
 * at each look instead (cpu_waiters.c: more waiters than CPUs). tbrt_link_idle. */
#define LINK_SPIN_RDMA 50e-6
#define LINK_SPIN_AWAKE 2e-3
#define LINK_CPU_SHARED 20e-3
#define LINK_CPU_TURNS 100e-3
#define LINK_YIELD_AFTER 20e-6
static inline double link_spin(const tbrt_link *l)
{
    return l->opts.spin >= 0 ? l->opts.spin : l->x.dev ? LINK_SPIN_RDMA : 0;
}

/* select.c: the device, port and GID facing the peer of the socket */
int link_select_device(tbrt_link *l, char *err, size_t errlen);

/* bootstrap.c: what the link's framing does at setup and on the socket */
int link_framing_opts(tbrt_link *l, char *err, size_t errlen);
int link_caps_flavor(const tbrt_link *l);
bool link_has_readiness(const tbrt_link *l, bool rdma);
bool link_has_goodbye(const tbrt_link *l);
/* a transport found the peer in another framing: tell the peer */
void link_took_wire(tbrt_link *l);
/* a readiness byte that is a peer's notice: the link fails naming it; 0 if not */
int link_ready_byte(tbrt_link *l, uint8_t b);
/* a byte (rc 1) or EOF/error (rc < 0) on the socket once up: true when the
 * framing decides (the result in *out), false to leave it to liveness.c */
bool link_socket_byte(tbrt_link *l, int rc, uint8_t b, int *out);

#endif
