/* private_dir.h - a per-uid directory in /dev/shm (0700) and files inside
 * it (0600) that another local user cannot plant or redirect. The directory
 * is /dev/shm/tbrt-<euid>, or $TBRT_SHM_DIR (checked the same way). */
#ifndef TBRT_PRIVATE_DIR_H
#define TBRT_PRIVATE_DIR_H

#include <stdbool.h>
#include <stddef.h>

/* The directory's path (not checked, not created); 0 or -errno. */
int private_dir_path(char *out, size_t len);
/* Create (0700) or open the directory and check it: ours, a directory, not a
 * link, mode 0700. Returns an O_DIRECTORY fd (path filled in) or -errno with
 * the reason, naming the path and its owner, in err. */
int private_dir_open(char *path, size_t pathlen, char *err, size_t errlen);
/* Open dir/name read-write without following links, creating it 0600 with
 * O_EXCL when missing (*created), then check it: a regular file, ours, mode
 * 0600. Returns the fd or -errno with the reason in err. */
int private_file_open(int dirfd, const char *dir, const char *name, bool *created, char *err,
                      size_t errlen);

/* Take flock(op) (LOCK_EX or LOCK_SH) on fd within $TBRT_LOCK_TIMEOUT
 * seconds (5 by default):
 * 0, -ETIMEDOUT when other processes held it all that time, or -errno. The
 * processes of this user hold these locks for microseconds; one stopped
 * while holding it (SIGSTOP, a debugger's breakpoint) would otherwise make
 * every other wait for it for good. When what is the file's name for
 * messages, err says what happened. */
int private_file_lock(int fd, int op, const char *what, char *err, size_t errlen);

#endif
