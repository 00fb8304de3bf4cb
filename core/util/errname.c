/* errname.c - errno values as their symbolic names ("ECONNRESET"), which the
 * Lua side puts in front of every error message, luv style. */
#include <errno.h>
#include <stdio.h>
#include "tbrt.h"

#define E(x) case x: return #x;

const char *tbrt_errname(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    E(EPERM) E(ENOENT) E(ESRCH) E(EINTR) E(EIO) E(ENXIO) E(E2BIG) E(EBADF)
    E(EAGAIN) E(ENOMEM) E(EACCES) E(EFAULT) E(EBUSY) E(EEXIST) E(ENODEV)
    E(EINVAL) E(ENFILE) E(EMFILE) E(ENOSPC) E(EPIPE) E(ERANGE) E(ENOSYS)
    E(ENODATA) E(ETIME) E(EPROTO) E(EBADMSG) E(EOVERFLOW) E(EMSGSIZE)
    E(EPROTONOSUPPORT) E(EOPNOTSUPP) E(EADDRINUSE) E(EADDRNOTAVAIL)
    E(ENETDOWN) E(ENETUNREACH) E(ECONNABORTED) E(ECONNRESET) E(ENOBUFS)
    E(EISCONN) E(ENOTCONN) E(ESHUTDOWN) E(ETIMEDOUT) E(ECONNREFUSED)
    E(EHOSTDOWN) E(EHOSTUNREACH) E(EALREADY) E(EINPROGRESS) E(ECANCELED)
    E(EREMOTEIO) E(ENOLINK)
    E(EILSEQ) E(ENOTSOCK) E(ESTALE)
    default: {
        static __thread char buf[16];
        snprintf(buf, sizeof buf, "E%d", err);
        return buf;
    }
    }
}
