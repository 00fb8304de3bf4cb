/* dv.h - what the direct-verbs stand-ins (libmlx5.so.1, libefa.so.1) share.
 *
 * perftest and UCX link the vendor libraries of rdma-core (libmlx5,
 * libefa), and those link libibverbs's provider interface
 * (IBVERBS_PRIVATE_34), which tbrt's libibverbs does not have: the real
 * ones cannot load on top of it. tbrt exec puts these first on the library
 * path instead. Each exports the vendor's functions at their symbol
 * versions, and each function answers as the real library does for a
 * device that is not the vendor's: false from the *_is_supported checks,
 * NULL with errno EOPNOTSUPP or EOPNOTSUPP otherwise. The soft device is
 * no Mellanox or Amazon device (vendor id 0), so programs that ask first
 * never get here. Under TBRT_DEBUG each call says so on stderr. */
#ifndef TBRT_DV_H
#define TBRT_DV_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static inline void dv_say(const char *lib, const char *call)
{
    const char *d = getenv("TBRT_DEBUG");
    if (d && *d && !(d[0] == '0' && !d[1]))
        fprintf(stderr, "tbrt %s: %s: EOPNOTSUPP: not supported: tbrt's soft devices are not %s "
                "devices (vendor id 0)\n", lib, call, lib);
}

/* A function that answers NULL / errno EOPNOTSUPP, or EOPNOTSUPP. */
#define DV_NULL(lib, type, name, ...)                                          \
    type name(__VA_ARGS__)                                                     \
    {                                                                          \
        dv_say(lib, #name);                                                    \
        errno = EOPNOTSUPP;                                                    \
        return NULL;                                                           \
    }
#define DV_INT(lib, name, ...)                                                 \
    int name(__VA_ARGS__)                                                      \
    {                                                                          \
        dv_say(lib, #name);                                                    \
        errno = EOPNOTSUPP;                                                    \
        return EOPNOTSUPP;                                                     \
    }
#define DV_VOID(lib, name, ...)                                                \
    void name(__VA_ARGS__) { dv_say(lib, #name); }

#endif
