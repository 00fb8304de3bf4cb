/* ibverbs_lib.c - loading libibverbs at run time, listing its devices, and
 * saying why there are none.
 *
 * The library is $TBRT_IBVERBS_LIB when set (tests point it at tbrt's own in
 * build/lib/tbrt/verbs/), else "libibverbs.so.1", or Apple's "/usr/lib/librdma.dylib"
 * on macOS. It is opened once, on the first call that needs it. Symbols are
 * looked up at the version this file was written against (rdma-core 44:
 * IBVERBS_1.1 for most, 1.0 for the completion channel calls, 1.11 for
 * _ibv_query_gid_ex), so a later library with a new default version keeps
 * giving us the ABI we were compiled for; a library without symbol
 * versions (Apple's, tbrt's Apple flavor librdma.so) answers plain dlsym.
 *
 * Flavor: Apple's library is librdma, so a library whose file name starts
 * with "librdma" gives APPLE devices (UC, fixed strides, Apple caps), as
 * does any library on macOS; everything else is LINUX. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibverbs/ibverbs.h"
#include "util/util.h"

#ifdef __APPLE__
#define IB_DEFAULT_LIB "/usr/lib/librdma.dylib"
#else
#define IB_DEFAULT_LIB "libibverbs.so.1"
#endif

struct ib_sym {
    const char *name;
    const char *version;        /* rdma-core's symbol version */
    size_t off;                 /* the field of struct ib_lib it fills */
    bool optional;
};

#define SYM(field, name, version) {name, version, offsetof(struct ib_lib, field), false}
static const struct ib_sym syms[] = {
    SYM(get_device_list, "ibv_get_device_list", "IBVERBS_1.1"),
    SYM(free_device_list, "ibv_free_device_list", "IBVERBS_1.1"),
    SYM(get_device_name, "ibv_get_device_name", "IBVERBS_1.1"),
    SYM(open_device, "ibv_open_device", "IBVERBS_1.1"),
    SYM(close_device, "ibv_close_device", "IBVERBS_1.1"),
    SYM(query_device, "ibv_query_device", "IBVERBS_1.1"),
    SYM(query_port, "ibv_query_port", "IBVERBS_1.1"),
    SYM(query_gid, "ibv_query_gid", "IBVERBS_1.1"),
    {"_ibv_query_gid_ex", "IBVERBS_1.11", offsetof(struct ib_lib, query_gid_ex), true},
    SYM(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1"),
    SYM(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1"),
    SYM(create_comp_channel, "ibv_create_comp_channel", "IBVERBS_1.0"),
    SYM(destroy_comp_channel, "ibv_destroy_comp_channel", "IBVERBS_1.0"),
    SYM(create_cq, "ibv_create_cq", "IBVERBS_1.1"),
    SYM(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1"),
    SYM(get_cq_event, "ibv_get_cq_event", "IBVERBS_1.1"),
    SYM(ack_cq_events, "ibv_ack_cq_events", "IBVERBS_1.1"),
    SYM(create_qp, "ibv_create_qp", "IBVERBS_1.1"),
    SYM(modify_qp, "ibv_modify_qp", "IBVERBS_1.1"),
    SYM(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1"),
    SYM(reg_mr, "ibv_reg_mr", "IBVERBS_1.1"),
    SYM(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1"),
    SYM(create_ah, "ibv_create_ah", "IBVERBS_1.1"),
    SYM(destroy_ah, "ibv_destroy_ah", "IBVERBS_1.1"),
};
#undef SYM

static struct ib_lib lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void *lookup(void *h, const struct ib_sym *s)
{
    void *p = NULL;
#ifdef __GLIBC__
    p = dlvsym(h, s->name, s->version);
#endif
    if (!p)
        p = dlsym(h, s->name);
    return p;
}

static int flavor_of(const char *path)
{
#ifdef __APPLE__
    (void)path;
    return TBRT_FLAVOR_APPLE;
#else
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, "librdma", 7) == 0 ? TBRT_FLAVOR_APPLE : TBRT_FLAVOR_LINUX;
#endif
}

static void load(void)
{
    const char *env = getenv("TBRT_IBVERBS_LIB");
    str_copy(lib.path, sizeof lib.path, env && *env ? env : IB_DEFAULT_LIB);
    lib.flavor = flavor_of(lib.path);
    dlerror();
    void *h = dlopen(lib.path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(lib.why, sizeof lib.why, "cannot load %s%s: %s; without rdma-core (libibverbs1) "
                 "there are no ibverbs devices", lib.path,
                 env && *env ? " (TBRT_IBVERBS_LIB)" : "", e ? e : "dlopen failed");
        return;
    }
    for (size_t i = 0; i < TBRT_ARRAY_LEN(syms); i++) {
        void *p = lookup(h, &syms[i]);
        if (!p && !syms[i].optional) {
            snprintf(lib.why, sizeof lib.why, "%s is not a usable libibverbs: it lacks %s",
                     lib.path, syms[i].name);
            /* a library that loaded something else may still be in use by
             * whoever else opened it: leave it loaded */
            return;
        }
        /* POSIX: a data pointer from dlsym holds the function's address */
        memcpy((char *)&lib + syms[i].off, &p, sizeof p);
    }
    lib.handle = h;
}

const struct ib_lib *ib_lib(void)
{
    pthread_once(&lib_once, load);
    return &lib;
}

int ib_errno(int rc)
{
    if (rc > 0)
        return rc;
    if (rc < -1)
        return -rc;
    return errno > 0 ? errno : EIO;
}

/* The sysfs libibverbs reads: $SYSFS_PATH when not setuid, as rdma-core's
 * ibv_get_sysfs_path() does, else /sys. */
static const char *sysfs_root(void)
{
    const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
    return env && *env ? env : "/sys";
}

static bool sys_has(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/class/%s", sysfs_root(), dir);
    return access(path, F_OK) == 0;
}

void ib_no_devices_why(const struct ib_lib *L, int err, char *out, size_t outlen)
{
    snprintf(out, outlen, "libibverbs found no RDMA devices (%s", L->path);
    if (err)
        str_append(out, outlen, ": ibv_get_device_list: %s", strerror(err));
    str_append(out, outlen, "); ");
    const char *sys = sysfs_root();
    if (L->flavor == TBRT_FLAVOR_APPLE)
        str_append(out, outlen, "is RDMA over Thunderbolt enabled? (TN3205: `rdma_ctl enable` "
                   "in macOS Recovery, macOS 26.2 or later, Thunderbolt 5)");
    else if (err == ENOSYS || !sys_has("infiniband_verbs"))
        str_append(out, outlen, "the kernel offers no RDMA verbs: %s/class/infiniband_verbs is "
                   "absent (no RDMA driver, or the ib_uverbs module is not loaded)", sys);
    else if (!sys_has("infiniband"))
        str_append(out, outlen, "%s/class/infiniband is absent: the kernel has no RDMA device",
                   sys);
    else
        str_append(out, outlen, "the devices in %s/class/infiniband have no user-space "
                   "provider, or /dev/infiniband/uverbs* cannot be opened (ibverbs-providers "
                   "installed? permissions?)", sys);
}

static void unusable(tbrt_devinfo *out, int max, const char *why, int flavor)
{
    if (max < 1 || !out)
        return;
    memset(out, 0, sizeof *out);
    str_copy(out->name, sizeof out->name, "ibverbs");
    str_copy(out->kind, sizeof out->kind, "ibverbs");
    out->flavor = flavor;
    str_copy(out->why, sizeof out->why, why);
}

int ib_list_devices(tbrt_devinfo *out, int max)
{
    const struct ib_lib *L = ib_lib();
    if (!L->handle) {
        unusable(out, max, L->why, 0);
        return 1;
    }
    int n = 0;
    errno = 0;
    struct ibv_device **list = L->get_device_list(&n);
    int err = list ? 0 : (errno ? errno : EIO);
    if (!list || n <= 0) {
        char why[TBRT_WHY_MAX];
        ib_no_devices_why(L, err, why, sizeof why);
        unusable(out, max, why, L->flavor);
        if (list)
            L->free_device_list(list);
        return 1;
    }
    for (int i = 0; i < n && i < max && out; i++) {
        tbrt_devinfo *d = &out[i];
        memset(d, 0, sizeof *d);
        const char *name = L->get_device_name(list[i]);
        str_copy(d->name, sizeof d->name, name ? name : "?");
        str_copy(d->kind, sizeof d->kind, "ibverbs");
        d->flavor = L->flavor;
        d->usable = name != NULL;
        if (!name)
            str_copy(d->why, sizeof d->why, "ibv_get_device_name returned no name");
    }
    L->free_device_list(list);
    return n;
}

int ib_open_context(const char *name, struct ibv_context **ctx, char *err, size_t errlen)
{
    const struct ib_lib *L = ib_lib();
    *ctx = NULL;
    if (!L->handle)
        return err_set(err, errlen, ENODEV, "%s: no such device (not soft<N> or mlx5:..., and "
                       "no ibverbs library: %s)", name, L->why);
    int n = 0;
    errno = 0;
    struct ibv_device **list = L->get_device_list(&n);
    if (!list || n <= 0) {
        char why[TBRT_WHY_MAX];
        ib_no_devices_why(L, list ? 0 : (errno ? errno : EIO), why, sizeof why);
        if (list)
            L->free_device_list(list);
        return err_set(err, errlen, ENODEV, "%s: no such device (not soft<N> or mlx5:..., and %s)",
                       name, why);
    }
    char names[TBRT_WHY_MAX / 2] = "";
    struct ibv_device *found = NULL;
    for (int i = 0; i < n; i++) {
        const char *dn = L->get_device_name(list[i]);
        if (dn && strcmp(dn, name) == 0)
            found = list[i];
        str_append(names, sizeof names, "%s%s", i ? ", " : "", dn ? dn : "?");
    }
    int rc = 0;
    if (!found) {
        rc = err_set(err, errlen, ENODEV, "%s: no such device (not soft<N> or mlx5:..., and "
                     "libibverbs lists only %s)", name, names);
    } else {
        errno = 0;
        *ctx = L->open_device(found);
        if (!*ctx) {
            int e = errno ? errno : EIO;
            rc = err_set(err, errlen, e, "%s: ibv_open_device: %s%s", name, strerror(e),
                         e == EACCES || e == EPERM ? " (no access to /dev/infiniband/uverbs*?)"
                                                   : "");
        }
    }
    /* an opened device stays valid after the list is freed */
    L->free_device_list(list);
    return rc;
}
