/* mlx5_stub.c - placeholder for the mlx5 device until it lands: lists one
 * unusable entry that says so. */
#include <errno.h>
#include <string.h>
#include "dev/dev.h"
#include "util/util.h"

static int stub_list(tbrt_devinfo *out, int max)
{
    if (max >= 1) {
        memset(out, 0, sizeof *out);
        str_copy(out->name, sizeof out->name, "mlx5");
        str_copy(out->kind, sizeof out->kind, "mlx5");
        str_copy(out->why, sizeof out->why, "the mlx5 device is not built yet");
    }
    return 1;
}

static int stub_open(const char *name, const tbrt_dev_opts *opts, tbrt_dev **out, char *err,
                     size_t errlen)
{
    (void)opts;
    *out = NULL;
    return err_set(err, errlen, ENODEV, "%s: the mlx5 device is not built yet", name);
}

const struct tbrt_dev_ops tbrt_mlx5_ops = {
    .kind = "mlx5",
    .list = stub_list,
    .open = stub_open,
};
