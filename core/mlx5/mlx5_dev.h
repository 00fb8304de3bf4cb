/* mlx5_dev.h - the handle behind tbrt_mlx5 (api.c) and the verbs device
 * built on it (verbs_ops.c, datapath.c). */
#ifndef MLX5_DEV_H
#define MLX5_DEV_H

#include <stdio.h>
#include "tbrt_mlx5.h"
#include "mlx5/hca.h"

struct model;

struct tbrt_mlx5 {
    struct mlx5_pci *pci;
    struct model *model;         /* the device model, or NULL for hardware */
    struct mlx5_hca *hca;
    FILE *trace;
    int trace_close;
    int torn_down;
    struct mlx5_dma *dma;        /* tbrt_mlx5_dma_alloc'ed memory */
    int ndma;
    char why[512];
};

struct tbrt_mlx5 *mlx5_handle_open(const tbrt_mlx5_opts *o, char *err, size_t errlen, int *rc);

#endif
