/* soft_mr.c - memory registration of the soft device: the rules of the API
 * and of the personalities (access combinations, the size of one region,
 * Apple's narrower rules), then the wire makes the memory reachable and
 * gives the key (wire/shm/shm_mem.c for shared memory). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "soft/soft.h"
#include "util/util.h"

int soft_reg_mr(tbrt_pd *pd, void *addr, size_t len, int access, tbrt_mr **out)
{
    return soft_reg_mr_iova(pd, addr, len, (uint64_t)(uintptr_t)addr, access, out);
}

int soft_reg_mr_iova(tbrt_pd *pd, void *addr, size_t len, uint64_t iova, int access,
                     tbrt_mr **out)
{
    struct soft_dev *sd = soft_of(pd->dev);
    const struct soft_personality *p = sd->p;
    const int remote = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (p->mr_needs_remote_access &&
        (access & (IBV_ACCESS_LOCAL_WRITE | remote)) != (IBV_ACCESS_LOCAL_WRITE | remote))
        return dev_fail(&sd->dev, EINVAL,
                        "reg_mr: access 0x%x lacks LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE; "
                        "Apple's provider rejects narrower access, even for SEND/RECV only",
                        access);
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE))
        return dev_fail(&sd->dev, EINVAL,
                        "reg_mr: REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE (access 0x%x)", access);
    if (len > p->max_mr)
        return dev_fail(&sd->dev, EINVAL, "reg_mr: %zu bytes exceeds the %" PRIu64
                        "-byte limit of one memory region", len, p->max_mr);
    struct soft_mr *m = calloc(1, sizeof *m);
    if (!m)
        return dev_fail(&sd->dev, ENOMEM, "reg_mr: out of memory");
    char why[TBRT_WHY_MAX];
    uint32_t key = 0;
    int rc = sd->wops->mr_reg(sd->wire, addr, len, iova, (uint32_t)access, &key, why,
                              sizeof why);
    if (rc) {
        free(m);
        return dev_fail(&sd->dev, -rc, "reg_mr: %s", why);
    }
    m->mr = (tbrt_mr){.dev = pd->dev, .pd = pd, .addr = addr, .length = len,
                      .lkey = key, .rkey = key, .access = access, .iova = iova};
    m->next = sd->mrs;
    sd->mrs = m;
    sd->mr_gen++;               /* what placements kept is looked up again */
    *out = &m->mr;
    return 0;
}

int soft_dereg_mr(tbrt_mr *mr)
{
    struct soft_mr *m = (struct soft_mr *)mr;
    struct soft_dev *sd = soft_of(mr->dev);
    if (sd->p->err_breaks_dereg && sd->qp_erred)
        return dev_fail(&sd->dev, EBUSY,
                        "dereg_mr: a queue pair of this device was moved to ERR; Apple's "
                        "provider then fails every region unmap (destroy QPs without ERR first)");
    sd->wops->mr_dereg(sd->wire, mr->lkey);
    sd->mr_gen++;
    for (struct soft_mr **pp = &sd->mrs; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    free(m);
    return 0;
}
