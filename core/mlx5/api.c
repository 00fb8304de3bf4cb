/* api.c - the public mlx5 API (tbrt_mlx5.h): open a model or a PCI device,
 * raw commands, fault injection, trace, model state, layout lookups. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tbrt_mlx5.h"
#include "mlx5/hca.h"
#include "mlx5/mlx5_dev.h"
#include "mlx5/model/model.h"
#include "util/util.h"

struct tbrt_mlx5 *mlx5_handle_open(const tbrt_mlx5_opts *o, char *err, size_t errlen, int *rc_out)
{
    tbrt_mlx5_opts none = {0};
    if (!o)
        o = &none;
    struct tbrt_mlx5 *d = calloc(1, sizeof *d);
    if (!d) {
        *rc_out = err_set(err, errlen, ENOMEM, "mlx5: out of memory");
        return NULL;
    }
    int rc;
    if (o->trace) {
        d->trace = stderr;
        if (o->trace_path && o->trace_path[0]) {
            d->trace = fopen(o->trace_path, "a");
            if (!d->trace) {
                rc = err_set(err, errlen, errno, "mlx5: trace file %s: %s", o->trace_path, strerror(errno));
                free(d);
                *rc_out = rc;
                return NULL;
            }
            d->trace_close = 1;
        }
    }
    if (o->pci && o->pci[0]) {
        rc = pci_open_hw(o->pci, &d->pci, err, errlen);
    } else {
        struct model_opts mo = {.boot_pages = o->model_boot_pages, .init_pages = o->model_init_pages,
                                .regular_pages = o->model_regular_pages};
        rc = pci_model_open(&mo, &d->pci, err, errlen);
        if (rc == 0)
            d->model = model_of_pci(d->pci);
    }
    if (rc == 0) {
        struct hca_opts ho = {.checksums = o->checksums, .raw = o->raw};
        rc = hca_open(d->pci, d->trace, &ho, &d->hca, err, errlen);
    }
    if (rc < 0) {
        if (d->pci)
            d->pci->ops->close(d->pci);
        if (d->trace_close)
            fclose(d->trace);
        free(d);
        *rc_out = rc;
        return NULL;
    }
    *rc_out = 0;
    return d;
}

int tbrt_mlx5_open(const tbrt_mlx5_opts *opts, tbrt_mlx5 **out, char *err, size_t errlen)
{
    if (!out)
        return err_set(err, errlen, EINVAL, "mlx5_open: no out pointer");
    int rc;
    *out = mlx5_handle_open(opts, err, errlen, &rc);
    return rc;
}

int tbrt_mlx5_teardown(tbrt_mlx5 *d)
{
    if (!d || !d->hca)
        return -EINVAL;
    if (d->torn_down)
        return 0;
    d->torn_down = 1;
    int rc = hca_teardown(d->hca);
    if (rc < 0)
        str_copy(d->why, sizeof d->why, d->hca->why);
    return rc;
}

int tbrt_mlx5_close(tbrt_mlx5 *d)
{
    if (!d)
        return -EINVAL;
    int rc = tbrt_mlx5_teardown(d);
    /* A teardown that failed (objects the caller made with raw commands
     * are still there, say) leaves the device free to write into the DMA
     * memory it was given: that stays mapped, as the firmware pages it
     * never gave back do (hca_free). */
    for (int i = 0; i < d->ndma && rc == 0; i++)
        d->pci->ops->dma_free(d->pci, &d->dma[i]);
    free(d->dma);
    hca_free(d->hca);
    d->pci->ops->close(d->pci);
    if (d->trace_close)
        fclose(d->trace);
    free(d);
    return rc;
}

const char *tbrt_mlx5_why(tbrt_mlx5 *d) { return d ? (d->why[0] ? d->why : d->hca->why) : "no device"; }
const char *tbrt_mlx5_addr(tbrt_mlx5 *d) { return d ? d->pci->addr : ""; }

int tbrt_mlx5_cmd(tbrt_mlx5 *d, const void *in, size_t inlen, void *out, size_t outlen)
{
    if (!d)
        return -EINVAL;
    d->why[0] = 0;
    if (inlen > UINT32_MAX || outlen > UINT32_MAX)
        return hca_fail(d->hca, EINVAL, "mlx5 command: lengths beyond 32 bits");
    return cmd_exec(d->hca, in, (uint32_t)inlen, out, (uint32_t)outlen);
}

uint32_t tbrt_mlx5_last_status(tbrt_mlx5 *d) { return d ? d->hca->last_status : 0; }
uint32_t tbrt_mlx5_last_syndrome(tbrt_mlx5 *d) { return d ? d->hca->last_syndrome : 0; }
uint32_t tbrt_mlx5_last_delivery(tbrt_mlx5 *d) { return d ? d->hca->last_delivery : 0; }

int tbrt_mlx5_inject(tbrt_mlx5 *d, int what)
{
    if (!d || what < TBRT_MLX5_INJECT_TOKEN || what > TBRT_MLX5_INJECT_CQE_OPCODE)
        return -EINVAL;
    if (what >= TBRT_MLX5_INJECT_CQE_WQE_COUNTER) {
        /* what the device writes: only a model can be made to lie */
        if (!d->model)
            return hca_fail(d->hca, ENODEV, "mlx5 inject: CQE faults need the device model");
        model_fault(d->model, MODEL_FAULT_CQE_WQE_COUNTER + (what - TBRT_MLX5_INJECT_CQE_WQE_COUNTER));
        return 0;
    }
    d->hca->inject = what;
    return 0;
}

void tbrt_mlx5_set_timeout(tbrt_mlx5 *d, int ms)
{
    if (d && ms > 0)
        d->hca->timeout_ms = ms;
}

int tbrt_mlx5_trace_to(tbrt_mlx5 *d, const char *path)
{
    if (!d)
        return -EINVAL;
    FILE *f = NULL;
    if (path && path[0] && !(f = fopen(path, "a")))
        return hca_fail(d->hca, errno, "mlx5 trace: %s: %s", path, strerror(errno));
    pthread_mutex_lock(&d->hca->cmd_lock);
    if (d->trace_close)
        fclose(d->trace);
    d->trace = f;
    d->trace_close = f != NULL;
    d->hca->trace = f;
    pthread_mutex_unlock(&d->hca->cmd_lock);
    return 0;
}

int tbrt_mlx5_dma_alloc(tbrt_mlx5 *d, size_t size, void **virt, uint64_t *bus)
{
    if (!d || !size || !virt || !bus)
        return -EINVAL;
    struct mlx5_dma *n = realloc(d->dma, sizeof *n * (size_t)(d->ndma + 1));
    if (!n)
        return -ENOMEM;
    d->dma = n;
    int rc = d->pci->ops->dma_alloc(d->pci, size, HCA_PAGE, &d->dma[d->ndma]);
    if (rc < 0)
        return hca_fail(d->hca, -rc, "mlx5 dma_alloc: %zu bytes: %s", size, strerror(-rc));
    *virt = d->dma[d->ndma].virt;
    *bus = d->dma[d->ndma].bus;
    d->ndma++;
    return 0;
}

int tbrt_mlx5_dma_free(tbrt_mlx5 *d, uint64_t bus)
{
    for (int i = 0; d && i < d->ndma; i++)
        if (d->dma[i].bus == bus) {
            d->pci->ops->dma_free(d->pci, &d->dma[i]);
            d->dma[i] = d->dma[--d->ndma];
            return 0;
        }
    return -ENOENT;
}

int tbrt_mlx5_model_state_get(tbrt_mlx5 *d, tbrt_mlx5_model_state *st)
{
    if (!d || !st)
        return -EINVAL;
    memset(st, 0, sizeof *st);
    if (!d->model)
        return -ENODEV;
    struct model_state s;
    model_state_get(d->model, &s);
    *st = (tbrt_mlx5_model_state){s.enabled, s.initialized, s.issi, s.pages_given, s.pages_owed,
                                  s.uars, s.pds, s.mkeys, s.eqs, s.cqs, s.qps, s.roce_entries,
                                  s.commands, s.bad_commands, s.wqes, s.cqes, s.eqes};
    return 0;
}

/* ---- layouts ------------------------------------------------------------------ */
static void field_out(tbrt_mlx5_field *f, const struct ifc_field *i)
{
    f->name = i->name;
    f->off = i->off;
    f->width = i->width;
    f->kind = i->kind;
}

int tbrt_mlx5_struct_size(const char *layout) { return ifc_struct_size(layout); }

int tbrt_mlx5_field_find(const char *layout, const char *path, tbrt_mlx5_field *f)
{
    struct ifc_field i;
    if (!f || ifc_field(layout, path, &i) < 0)
        return -ENOENT;
    field_out(f, &i);
    return 0;
}

int tbrt_mlx5_field_at(const char *layout, int idx, tbrt_mlx5_field *f)
{
    struct ifc_field i;
    if (!f || ifc_field_at(layout, idx, &i) < 0)
        return -1;
    field_out(f, &i);
    return 0;
}

int tbrt_mlx5_opcode(const char *name) { return ifc_opcode(name); }
const char *tbrt_mlx5_opcode_name(uint32_t op) { return ifc_opcode_name(op); }
const char *tbrt_mlx5_cmd_layout(uint32_t op, int output) { return ifc_cmd_struct(op, output); }
int tbrt_mlx5_const(const char *name, uint32_t *v) { return v && ifc_const(name, v) == 0 ? 0 : -ENOENT; }
const char *tbrt_mlx5_const_name(const char *g, uint32_t v) { return ifc_const_name(g, v); }
const char *tbrt_mlx5_const_meaning(const char *g, uint32_t v) { return ifc_const_meaning(g, v); }

uint32_t tbrt_mlx5_get(const void *buf, uint32_t off, uint32_t width)
{
    return buf && width && width <= 32 ? ifc_get(buf, off, width) : 0;
}

void tbrt_mlx5_set(void *buf, uint32_t off, uint32_t width, uint32_t v)
{
    if (buf && width && width <= 32)
        ifc_set(buf, off, width, v);
}

void tbrt_mlx5_get_bytes(const void *buf, uint32_t off, uint32_t width, void *out)
{
    if (buf && out && width)
        ifc_get_bytes(buf, off, width, out);
}

void tbrt_mlx5_set_bytes(void *buf, uint32_t off, uint32_t width, const void *in)
{
    if (buf && in && width)
        ifc_set_bytes(buf, off, width, in);
}
