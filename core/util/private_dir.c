/* private_dir.c - files in shared directories (/dev/shm) that another local
 * user cannot plant, pre-create or redirect: a per-uid directory created
 * 0700 and checked (a real directory, ours, no access for anyone else), and
 * files inside it opened without following links, created exclusively with
 * mode 0600, and checked the same way after opening (fstat on the open
 * descriptor, so the check and the use are of the same file). */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/private_dir.h"
#include "util/util.h"

static const char *owner_name(uid_t uid, char *buf, size_t len)
{
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (getpwuid_r(uid, &pw, tmp, sizeof tmp, &res) == 0 && res)
        snprintf(buf, len, "%s (uid %u)", res->pw_name, (unsigned)uid);
    else
        snprintf(buf, len, "uid %u", (unsigned)uid);
    return buf;
}

/* Refuse what is not ours and private: names the path, what it is, whose. */
static int check_private(const struct stat *st, bool dir, const char *path, char *err,
                         size_t errlen)
{
    char who[128];
    if (dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
        return err_set(err, errlen, EPERM, "%s is not a %s (refusing to use it; remove it if it "
                       "is not yours)", path, dir ? "directory" : "regular file");
    if (st->st_uid != geteuid())
        return err_set(err, errlen, EPERM, "%s belongs to %s, not to us (uid %u): refusing to "
                       "use it (another user may have planted it)", path,
                       owner_name(st->st_uid, who, sizeof who), (unsigned)geteuid());
    unsigned want = dir ? 0700 : 0600;
    if ((st->st_mode & 07777) != want)
        return err_set(err, errlen, EPERM, "%s has mode %04o, not %04o: refusing to use it "
                       "(others could read or change it)", path, (unsigned)(st->st_mode & 07777),
                       want);
    return 0;
}

int private_dir_path(char *out, size_t len)
{
    const char *base = getenv("TBRT_SHM_DIR");
    if (base && *base)
        return snprintf(out, len, "%s", base) >= (int)len ? -ENAMETOOLONG : 0;
    return snprintf(out, len, "/dev/shm/tbrt-%u", (unsigned)geteuid()) >= (int)len
               ? -ENAMETOOLONG : 0;
}

int private_dir_open(char *path, size_t pathlen, char *err, size_t errlen)
{
    int rc = private_dir_path(path, pathlen);
    if (rc)
        return err_set(err, errlen, -rc, "private directory: path too long");
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return err_set(err, errlen, errno, "mkdir %s: %s", path, strerror(errno));
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            return err_set(err, errlen, EPERM, "%s is a symbolic link or not a directory: "
                           "refusing to use it (another user may have planted it)", path);
        return err_set(err, errlen, errno, "open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, errlen, e, "stat %s: %s", path, strerror(e));
    }
    if ((rc = check_private(&st, true, path, err, errlen)) != 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int private_file_open(int dirfd, const char *dir, const char *name, bool *created, char *err,
                      size_t errlen)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *created = false;
    int fd = -1;
    for (int tries = 0; tries < 4 && fd < 0; tries++) {
        fd = openat(dirfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        if (fd >= 0 || errno != ENOENT)
            break;
        /* not there: make it ours, or find the one a racing process made */
        fd = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
                    0600);
        if (fd >= 0) {
            *created = true;
            /* the umask may have taken bits: set exactly 0600 */
            if (fchmod(fd, 0600) != 0) {
                int e = errno;
                close(fd);
                return err_set(err, errlen, e, "chmod %s: %s", path, strerror(e));
            }
        } else if (errno != EEXIST) {
            break;
        }
    }
    if (fd < 0) {
        if (errno == ELOOP)
            return err_set(err, errlen, EPERM, "%s is a symbolic link: refusing to follow it "
                           "(another user may have planted it)", path);
        return err_set(err, errlen, errno, "open %s: %s", path, strerror(errno));
    }
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? err_set(err, errlen, errno, "stat %s: %s", path, strerror(errno))
                                 : check_private(&st, false, path, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

/* The lock's bound: $TBRT_LOCK_TIMEOUT seconds, 5 by default. */
static double lock_timeout(void)
{
    double t = env_double("TBRT_LOCK_TIMEOUT", 5.0);
    return t > 0 && t < 3600 ? t : 5.0;
}

int private_file_lock(int fd, int op, const char *what, char *err, size_t errlen)
{
    if (flock(fd, op | LOCK_NB) == 0)
        return 0;               /* the usual case: free, one syscall as before */
    double bound = lock_timeout(), deadline = 0;
    for (unsigned naps = 0;; naps++) {
        if (flock(fd, op | LOCK_NB) == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK)
            return err_set(err, errlen, errno, "lock %s: %s", what, strerror(errno));
        double now = now_s();
        if (!deadline)
            deadline = now + bound;
        else if (now >= deadline)
            return err_set(err, errlen, ETIMEDOUT, "lock %s: another process held it for %.3g s "
                           "(TBRT_LOCK_TIMEOUT; they hold it for microseconds: is one stopped "
                           "while holding it, by SIGSTOP or a debugger? `fuser -v` on the file "
                           "names them)", what, bound);
        /* holders keep it for microseconds: short naps first */
        struct timespec ts = {0, naps < 50 ? 20000 : 1000000};
        nanosleep(&ts, NULL);
    }
}
