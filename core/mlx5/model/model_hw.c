/* model_hw.c - the device model's hardware side: BAR0 registers (init
 * segment, UAR doorbells), the doorbell ring, the model thread, and the
 * command queue delivery (entries, mailbox chains, tokens, signatures,
 * delivery status) that hands commands to the firmware (model_fw.c). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "mlx5/cmdif.h"
#include "mlx5/model/model_int.h"
#include "mlx5_cx4_caps.h"
#include "util/util.h"

enum {
    MAX_CMD_LEN = 4 << 20,       /* larger streams are refused (delivery length error);
                                  * 4 MiB carries the MTT of a 2 GiB region */
    IDLE_POLL_MS = 100,          /* the thread checks stop this often when idle */
};

static void snapshot(struct model *m);

/* ---- the command queue -------------------------------------------------------- */

/* Walk a mailbox chain of n blocks; 0 or the delivery status. */
static int walk_chain(struct model *m, uint64_t ptr, uint32_t n, uint8_t token, int check_sig,
                      uint8_t **blocks)
{
    for (uint32_t k = 0; k < n; k++) {
        if (ptr & MBOX_NEXT_ALIGN_MASK)
            return MLX5C_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR;
        uint8_t *b = model_dma(m, ptr, MBOX_SIZE);
        if (!b)
            return MLX5C_CMD_DELIVERY_STAT_FW_ERR;
        if (ld_be32(b + MBOX_BLOCK_NUM) != k)
            return MLX5C_CMD_DELIVERY_STAT_BAD_BLK_NUM_ERR;
        if (b[MBOX_TOKEN] != token)
            return MLX5C_CMD_DELIVERY_STAT_TOK_ERR;
        /* as Linux verify_block_sig: rsvd0..ctrl_sig, then the whole block */
        if (check_sig && (xor8(b + MBOX_CTRL, MBOX_SIG - MBOX_CTRL) != 0xff ||
                          xor8(b, MBOX_SIZE) != 0xff))
            return MLX5C_CMD_DELIVERY_STAT_SIGNAT_ERR;
        blocks[k] = b;
        ptr = ld_be64(b + MBOX_NEXT);
    }
    return 0;
}

static uint32_t nblocks(uint32_t len) { return len > CMD_INLINE ? (len - CMD_INLINE + MBOX_DATA_SIZE - 1) / MBOX_DATA_SIZE : 0; }

static int deliver(struct model *m, uint8_t *e)
{
    int sums = model_fw_checksums(m);
    if (e[CMDE_TYPE] != CMD_XPORT_PCI)
        return MLX5C_CMD_DELIVERY_STAT_CMD_DESCR_ERR;
    if (sums && xor8(e, CMD_ENTRY_SIZE) != 0xff)
        return MLX5C_CMD_DELIVERY_STAT_SIGNAT_ERR;
    uint32_t inlen = ld_be32(e + CMDE_INLEN), outlen = ld_be32(e + CMDE_OUTLEN);
    uint64_t in_ptr = ld_be64(e + CMDE_IN_PTR), out_ptr = ld_be64(e + CMDE_OUT_PTR);
    if (inlen < 8 || inlen > MAX_CMD_LEN)
        return MLX5C_CMD_DELIVERY_STAT_IN_LENGTH_ERR;
    if (outlen < 8 || outlen > MAX_CMD_LEN)
        return MLX5C_CMD_DELIVERY_STAT_OUT_LENGTH_ERR;
    if (inlen > CMD_INLINE && (in_ptr & CMD_PTR_ALIGN_MASK))
        return MLX5C_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR;
    if (outlen > CMD_INLINE && (out_ptr & CMD_PTR_ALIGN_MASK))
        return MLX5C_CMD_DELIVERY_STAT_OUT_PTR_ALIGN_ERR;
    uint32_t nin = nblocks(inlen), nout = nblocks(outlen);
    uint8_t **inb = calloc(nin + 1, sizeof *inb), **outb = calloc(nout + 1, sizeof *outb);
    uint8_t *in = calloc(1, inlen), *out = calloc(1, outlen);
    int ds = 0;
    if (!inb || !outb || !in || !out)
        ds = MLX5C_CMD_DELIVERY_STAT_FW_ERR;
    if (!ds)
        ds = walk_chain(m, in_ptr, nin, e[CMDE_TOKEN], sums, inb);
    if (!ds) {
        ds = walk_chain(m, out_ptr, nout, e[CMDE_TOKEN], 0, outb);
        if (ds == MLX5C_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR)
            ds = MLX5C_CMD_DELIVERY_STAT_OUT_PTR_ALIGN_ERR;
    }
    if (!ds) {
        memcpy(in, e + CMDE_IN, TBRT_MIN(inlen, (uint32_t)CMD_INLINE));
        for (uint32_t k = 0; k < nin; k++) {
            uint32_t off = CMD_INLINE + k * MBOX_DATA_SIZE;
            memcpy(in + off, inb[k], TBRT_MIN((uint32_t)MBOX_DATA_SIZE, inlen - off));
        }
        struct model_cmd c = {in, inlen, out, outlen, (uint16_t)ld_be32(in) >> 0, 0};
        c.opcode = (uint16_t)(ld_be32(in) >> 16);
        c.op_mod = (uint16_t)ld_be32(in + 4);
        model_fw_execute(m, &c);
        memcpy(e + CMDE_OUT, out, TBRT_MIN(outlen, (uint32_t)CMD_INLINE));
        for (uint32_t k = 0; k < nout; k++) {
            uint32_t off = CMD_INLINE + k * MBOX_DATA_SIZE;
            memset(outb[k], 0, MBOX_DATA_SIZE);
            memcpy(outb[k], out + off, TBRT_MIN((uint32_t)MBOX_DATA_SIZE, outlen - off));
            if (sums) {
                outb[k][MBOX_CTRL_SIG] = 0;
                outb[k][MBOX_SIG] = 0;
                outb[k][MBOX_CTRL_SIG] = (uint8_t)~xor8(outb[k] + MBOX_CTRL, MBOX_CTRL_SIG - MBOX_CTRL);
                outb[k][MBOX_SIG] = (uint8_t)~xor8(outb[k], MBOX_SIG);
            }
        }
    }
    free(inb);
    free(outb);
    free(in);
    free(out);
    return ds;
}

static void process_slot(struct model *m, int slot)
{
    uint64_t q = (uint64_t)m->cmdq_h << 32 | (m->cmdq_l & ~0xfffu);
    uint8_t *e = model_dma(m, q + ((uint64_t)slot << MODEL_LOG_CMDQ_STRIDE), CMD_ENTRY_SIZE);
    if (!e) {
        m->bad_commands++; /* a queue outside DMA memory: nowhere to answer */
        return;
    }
    if (!(__atomic_load_n(&e[CMDE_STATUS_OWN], __ATOMIC_ACQUIRE) & CMD_OWNER_HW))
        return; /* rung without being handed over: firmware ignores it */
    int ds = deliver(m, e);
    if (ds)
        m->bad_commands++;
    /* Signature as if ownership stayed set, then hand back (cmd-layout.md 4). */
    e[CMDE_STATUS_OWN] = (uint8_t)(ds << 1 | CMD_OWNER_HW);
    e[CMDE_SIG] = 0;
    e[CMDE_SIG] = (uint8_t)~xor8(e, CMD_ENTRY_SIZE);
    snapshot(m); /* the state a caller reads after completion includes this command */
    __atomic_store_n(&e[CMDE_STATUS_OWN], (uint8_t)(ds << 1), __ATOMIC_RELEASE);
}

/* ---- BAR0 -------------------------------------------------------------------- */

uint32_t model_read32(struct model *m, uint32_t off)
{
    uint32_t v = 0;
    pthread_mutex_lock(&m->lock);
    switch (off) {
    case INIT_FW_REV: v = (uint32_t)MODEL_FW_MINOR << 16 | MODEL_FW_MAJOR; break;
    case INIT_CMDIF_REV_FW_SUB: v = (uint32_t)MODEL_CMDIF_REV << 16 | MODEL_FW_SUB; break;
    case INIT_CMDQ_ADDR_H: v = m->cmdq_h; break;
    case INIT_CMDQ_ADDR_L_SZ:
        v = (m->cmdq_l & ~0xffu) | MODEL_LOG_CMDQ_SIZE << 4 | MODEL_LOG_CMDQ_STRIDE;
        break;
    case INIT_INITIALIZING:
        if (m->init_reads_left > 0) {
            m->init_reads_left--;
            v = 1u << INIT_INITIALIZING_BIT;
        }
        break;
    case INIT_HEALTH_COUNTER: v = m->health++; break;
    default: break;
    }
    pthread_mutex_unlock(&m->lock);
    return v;
}

static void ring_push(struct model *m, uint32_t off, const void *bytes, int len)
{
    pthread_mutex_lock(&m->lock);
    if (m->ring_head - m->ring_tail < DOORBELL_RING) {
        struct model_doorbell *d = &m->ring[m->ring_head++ % DOORBELL_RING];
        d->off = off;
        d->len = len;
        memcpy(d->bytes, bytes, (size_t)len);
    } else {
        m->ring_dropped++;
    }
    pthread_mutex_unlock(&m->lock);
    model_wake(m);
}

void model_write32(struct model *m, uint32_t off, uint32_t val)
{
    if (off >= MODEL_UAR_BASE * UAR_PAGE && off < MODEL_BAR0_SIZE) {
        uint8_t b[4];
        st_be32(b, val);
        ring_push(m, off, b, 4);
        return;
    }
    pthread_mutex_lock(&m->lock);
    switch (off) {
    case INIT_CMDQ_ADDR_H: m->cmdq_h = val; break;
    case INIT_CMDQ_ADDR_L_SZ: m->cmdq_l = val; break;
    case INIT_CMD_DBELL: m->dbell_pending |= val; break;
    default: break;
    }
    pthread_mutex_unlock(&m->lock);
    if (off == INIT_CMD_DBELL)
        model_wake(m);
}

/* Receive WQEs posted: the model thread takes them to the wire; wait
 * (bounded) until it has, so a message sent right after finds them. */
void model_rq_posted(struct model *m, uint32_t qpn)
{
    enum { RQ_WAIT_MS = 1000 };
    pthread_mutex_lock(&m->lock);
    uint64_t ticket = ++m->rq_ticket;
    if (m->ring_head - m->ring_tail < DOORBELL_RING) {
        struct model_doorbell *d = &m->ring[m->ring_head++ % DOORBELL_RING];
        d->off = qpn;
        d->len = 0;
    }
    pthread_mutex_unlock(&m->lock);
    model_wake(m);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += RQ_WAIT_MS / 1000;
    pthread_mutex_lock(&m->lock);
    while (m->rq_done < ticket && !atomic_load(&m->stop))
        if (pthread_cond_timedwait(&m->rq_cond, &m->lock, &until) != 0)
            break;
    pthread_mutex_unlock(&m->lock);
}

void model_write64(struct model *m, uint32_t off, const void *bytes8)
{
    if (off >= MODEL_UAR_BASE * UAR_PAGE && off < MODEL_BAR0_SIZE)
        ring_push(m, off, bytes8, 8);
}

static void doorbell(struct model *m, const struct model_doorbell *d)
{
    if (d->len == 0) {
        model_data_rq_posted(m, d->off);
        return;
    }
    uint32_t uar = d->off / UAR_PAGE, reg = d->off % UAR_PAGE;
    if (!m->uar_used[uar - MODEL_UAR_BASE])
        return; /* a write to an unallocated UAR page goes nowhere */
    uint32_t w0 = ld_be32(d->bytes), w1 = d->len == 8 ? ld_be32(d->bytes + 4) : 0;
    if (reg == UAR_CQ_DOORBELL && d->len == 8)
        model_data_cq_arm(m, w1 & 0xffffff, w0 >> 28 & 3, w0 & 0xffffff);
    else if (reg == UAR_EQ_ARM || reg == UAR_EQ_NOARM)
        model_data_eq_doorbell(m, w0 >> 24, w0 & 0xffffff, reg == UAR_EQ_ARM);
    else if (reg >= UAR_BF0 && reg < UAR_BF1 + 0x100 && d->len == 8)
        model_data_sq_doorbell(m, w1 >> 8);
}

/* ---- the model thread ------------------------------------------------------- */

static void snapshot(struct model *m)
{
    struct model_state st = {0};
    st.enabled = m->enabled;
    st.initialized = m->initialized;
    st.issi = m->issi;
    st.pages_given = m->npages;
    /* a model may be told to ask for absurd numbers (specs of the driver) */
    int64_t owed = (int64_t)m->boot_owed + m->init_owed + m->regular_owed;
    st.pages_owed = owed > INT32_MAX ? INT32_MAX : (int)owed;
    model_objects_count(m, &st);
    st.commands = m->commands;
    st.bad_commands = m->bad_commands;
    st.wqes = m->wqes;
    st.cqes = m->cqes;
    st.eqes = m->eqes;
    pthread_mutex_lock(&m->lock);
    m->snap = st;
    pthread_mutex_unlock(&m->lock);
}

static void *model_thread(void *arg)
{
    struct model *m = arg;
    while (!atomic_load(&m->stop)) {
        struct pollfd fds[2] = {{.fd = m->wake_fd, .events = POLLIN}, {.fd = -1}};
        int nfds = 1, sfd = model_data_fd(m);
        if (sfd >= 0) {
            fds[1] = (struct pollfd){.fd = sfd, .events = POLLIN};
            nfds = 2;
        }
        poll(fds, (nfds_t)nfds, model_data_busy(m) ? 1 : IDLE_POLL_MS);
        uint64_t n;
        if (fds[0].revents & POLLIN)
            if (read(m->wake_fd, &n, sizeof n) < 0) {
                /* nothing to drain */
            }
        pthread_mutex_lock(&m->lock);
        uint32_t slots = m->dbell_pending;
        m->dbell_pending = 0;
        pthread_mutex_unlock(&m->lock);
        for (int s = 0; s < 32; s++)
            if (slots & (1u << s))
                process_slot(m, s);
        for (;;) {
            struct model_doorbell d;
            pthread_mutex_lock(&m->lock);
            int have = m->ring_tail != m->ring_head;
            if (have)
                d = m->ring[m->ring_tail++ % DOORBELL_RING];
            pthread_mutex_unlock(&m->lock);
            if (!have)
                break;
            doorbell(m, &d);
        }
        pthread_mutex_lock(&m->lock);
        m->rq_done = m->rq_ticket; /* every rq_posted queued so far is handled */
        pthread_cond_broadcast(&m->rq_cond);
        pthread_mutex_unlock(&m->lock);
        model_data_poll(m);
        snapshot(m);
    }
    return NULL;
}

void model_state_get(struct model *m, struct model_state *st)
{
    pthread_mutex_lock(&m->lock);
    *st = m->snap;
    pthread_mutex_unlock(&m->lock);
}

/* Live models, so their threads stop before the library goes away (a
 * script that exits without closing its devices, dlclose at lua_close). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct model *live[64];

static void live_add(struct model *m, int add)
{
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < TBRT_ARRAY_LEN(live); i++)
        if (add ? !live[i] : live[i] == m) {
            live[i] = add ? m : NULL;
            break;
        }
    pthread_mutex_unlock(&live_lock);
}

__attribute__((destructor)) static void stop_live_models(void)
{
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < TBRT_ARRAY_LEN(live); i++)
        if (live[i] && live[i]->thread_started) {
            atomic_store(&live[i]->stop, 1);
            model_wake(live[i]);
            pthread_join(live[i]->thread, NULL);
            live[i]->thread_started = 0;
        }
    pthread_mutex_unlock(&live_lock);
}

struct model *model_create(const struct model_opts *opts, char *err, size_t errlen)
{
    static atomic_uint instances;
    struct model *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(err, errlen, ENOMEM, "mlx5 model: out of memory");
        return NULL;
    }
    if (opts)
        m->opts = *opts;
    if (!m->opts.boot_pages)
        m->opts.boot_pages = MODEL_BOOT_PAGES;
    if (!m->opts.init_pages)
        m->opts.init_pages = MODEL_INIT_PAGES;
    if (!m->opts.regular_pages)
        m->opts.regular_pages = MODEL_REGULAR_PAGES;
    m->init_reads_left = m->opts.init_reads ? m->opts.init_reads : MODEL_INIT_READS;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->rq_cond, NULL);
    for (int i = 0; i < MODEL_IRQ_VECTORS; i++)
        m->irq_fd[i] = -1;
    model_bus_init(m);
    unsigned inst = atomic_fetch_add(&instances, 1);
    snprintf(m->pci.addr, sizeof m->pci.addr, "model%u", inst);
    /* A locally administered MAC: 02:6d:6c ("ml") + pid + instance. */
    uint32_t tag = (uint32_t)getpid() << 8 ^ inst;
    uint8_t mac[6] = {0x02, 0x6d, 0x6c, (uint8_t)(tag >> 16), (uint8_t)(tag >> 8), (uint8_t)tag};
    memcpy(m->mac, mac, sizeof mac);
    for (size_t i = 0; i < TBRT_ARRAY_LEN(cx4_cap_pages); i++) {
        memcpy(m->caps[cx4_cap_pages[i].op_mod], cx4_cap_pages[i].bytes, CAP_PAGE);
        m->caps_valid[cx4_cap_pages[i].op_mod] = 1;
    }
    m->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int ok = m->wake_fd >= 0;
    for (int i = 0; ok && i < MODEL_IRQ_VECTORS; i++)
        ok = (m->irq_fd[i] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) >= 0;
    if (!ok || pthread_create(&m->thread, NULL, model_thread, m) != 0) {
        err_set(err, errlen, EAGAIN, "mlx5 model: cannot start (%s)", strerror(errno));
        model_destroy(m);
        return NULL;
    }
    m->thread_started = 1;
    live_add(m, 1);
    return m;
}

void model_destroy(struct model *m)
{
    if (!m)
        return;
    live_add(m, 0);
    if (m->thread_started) {
        atomic_store(&m->stop, 1);
        model_wake(m);
        pthread_join(m->thread, NULL);
    }
    model_objects_reset(m);
    model_soft_close(m);
    for (int i = 0; i < MODEL_IRQ_VECTORS; i++)
        if (m->irq_fd[i] >= 0)
            close(m->irq_fd[i]);
    if (m->wake_fd > 0)
        close(m->wake_fd);
    pthread_cond_destroy(&m->rq_cond);
    pthread_mutex_destroy(&m->lock);
    free(m->regions);
    free(m->pages);
    free(m);
}
