/* shm_event.c - what wakes a sleeping owner of the shared-memory wire
 * besides a result: the device's event doorbell and the CQs' timers.
 *
 *   event doorbell  the doorbell after the CQs' (SHM_EVENT_DB) and its
 *                   socket, named as theirs (wake-<pid>-<ctx>-<db> in the
 *                   private directory): peers ring it when they move one of
 *                   our QPs to ERR or cross an SRQ's limit; any process that
 *                   changes a port state sends to every event socket in the
 *                   directory (ports_changed). Its fd is wire.h's event_fd.
 *   CQ alarms       a send queue waiting for a timer (an RNR retry, an ACK
 *                   timeout) sets the alarm of its send CQ (soft_alarm): at
 *                   the due time the alarm thread rings that CQ's doorbell,
 *                   as a result would, and the owner's poll runs the retry.
 *                   Only a CQ that is armed needs it: an owner that polls
 *                   runs the retry at its own turn (its queue is not quiet),
 *                   so until it arms the time is only kept. A stream whose
 *                   receiver reposts late meets a wait now and then; handing
 *                   each one to the thread woke it (a futex, a context
 *                   switch on a machine whose CPUs both ran the two ends)
 *                   about twice a 4 MiB message for nothing. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"

/* A process that exits with devices still open takes its wake-up sockets
 * along (exit() runs this; after a crash the next process's sweep does,
 * shm_fabric.c): the directory of the first one bound, every
 * wake-<our pid>-... in it. */
static char exit_dir[sizeof ((struct soft_wire *)0)->shm_dir];
static atomic_bool exit_hooked;

static void unlink_own_wakes(void)
{
    DIR *d = opendir(exit_dir);
    if (!d)
        return;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "wake-%d-", (int)getpid());
    size_t pl = strlen(prefix);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, prefix, pl) == 0)
            unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
}

int shm_wake_bind(struct soft_wire *w, uint32_t db)
{
    struct sockaddr_un a;
    socklen_t len;
    int rc = shm_wake_addr(w, w->pid, w->ctx_id, db, &a, &len);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    unlink(a.sun_path);         /* ours by name (pid and context): a leftover */
    if (bind(fd, (struct sockaddr *)&a, len)) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!atomic_exchange(&exit_hooked, true)) {
        str_copy(exit_dir, sizeof exit_dir, w->shm_dir);
        atexit(unlink_own_wakes);
    }
    return fd;
}

void shm_wake_unbind(struct soft_wire *w, int fd, uint32_t db)
{
    struct sockaddr_un a;
    socklen_t len;
    close(fd);
    if (shm_wake_addr(w, w->pid, w->ctx_id, db, &a, &len) == 0)
        unlink(a.sun_path);
}

int shm_event_open(struct soft_wire *w, char *why, size_t len)
{
    w->event_db = (struct shm_doorbell *)((char *)w->ctx + SHM_CTX_DB_OFF) + SHM_EVENT_DB;
    int fd = shm_wake_bind(w, SHM_EVENT_DB);
    if (fd < 0)
        return err_set(why, len, -fd, "event socket in %s: %s", w->shm_dir, strerror(-fd));
    w->event_fd = fd;
    return 0;
}

void shm_event_close(struct soft_wire *w)
{
    if (w->event_fd >= 0)
        shm_wake_unbind(w, w->event_fd, SHM_EVENT_DB);
    w->event_fd = -1;
}

int shm_event_fd(struct soft_wire *w) { return w->event_fd; }

void shm_event_arm(struct soft_wire *w)
{
    atomic_store(&w->event_db->armed, 1);
    atomic_thread_fence(memory_order_seq_cst);  /* pairs with shm_ring's */
}

void shm_event_ack(struct soft_wire *w)
{
    char buf[64];
    while (recv(w->event_fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        ;
}

/* Every event socket of the directory: wake-<pid>-<ctx>-<SHM_EVENT_DB>.
 * Other fabrics' devices hear it too, look at their ports and find nothing
 * changed: a port change is rare, and no fabric is named in a socket. */
void shm_ports_changed(struct soft_wire *w)
{
    DIR *d = opendir(w->shm_dir);
    if (!d)
        return;
    char tail[24];
    snprintf(tail, sizeof tail, "-%u", (unsigned)SHM_EVENT_DB);
    size_t tl = strlen(tail);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, "wake-", 5) != 0 || n <= tl ||
            strcmp(de->d_name + n - tl, tail) != 0)
            continue;
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        int k = snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", w->shm_dir, de->d_name);
        if (k < 0 || (size_t)k >= sizeof a.sun_path)
            continue;
        char b = 1;
        sendto(w->wake_fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)k + 1));
    }
    closedir(d);
}

/* On the alarm thread: ring the CQ's doorbell as a result would (only the
 * doorbell's atomics and a datagram; the wire's fields read are fixed
 * since it was opened). */
static void cq_alarm_ring(struct soft_alarm *a)
{
    struct soft_wire_cq *c = (struct soft_wire_cq *)((char *)a - offsetof(struct soft_wire_cq,
                                                                          alarm));
    shm_ring(c->w, c->w->self, c->dbp, c->db);
}

void shm_cq_alarm_init(struct soft_wire_cq *c) { c->alarm.ring = cq_alarm_ring; }

void shm_cq_alarm_at(struct soft_wire_cq *c, uint64_t due_ns)
{
    if (!due_ns)
        due_ns = 1;
    /* armed (its owner sleeps, or is about to): the thread must ring it */
    if (atomic_load_explicit(&c->dbp->armed, memory_order_relaxed)) {
        soft_alarm_set(&c->alarm, due_ns);
        return;
    }
    if (!c->due_ns || due_ns < c->due_ns)
        c->due_ns = due_ns;
}

/* The owner armed the CQ (after the fence that pairs with shm_ring's). A
 * time kept may be stale by now (the retry ran at a poll since): then the
 * alarm rings once for nothing, and the owner looks and sleeps again. */
void shm_cq_alarm_armed(struct soft_wire_cq *c)
{
    if (!c->due_ns)
        return;
    soft_alarm_set(&c->alarm, c->due_ns);
    c->due_ns = 0;
}
