/* soft_personality.c - the soft device's personalities: each platform's
 * rules as data (which QP types, how deep, how large, what registration
 * needs, credit flow, GID types, ports), enforced by the soft_*.c objects.
 * apple-uc is Apple's TN3205 with what llama.cpp's RDMA transport learned;
 * linux-rc a Linux RoCE NIC (ConnectX-like). */
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

static const struct soft_personality personalities[] = {
    {
        /* Apple TN3205 plus what llama.cpp's RDMA transport learned */
        .name = "apple-uc",
        .flavor = TBRT_FLAVOR_APPLE,
        .qp_types = 1u << IBV_QPT_UC,
        .max_qp = SOFT_APPLE_MAX_QP,
        .depth_in_frames = true,
        .max_qp_wr = SOFT_APPLE_MAX_FRAMES,
        .max_msg = SOFT_APPLE_MAX_MSG,
        .max_mr = SOFT_APPLE_MAX_MR,
        .mr_needs_remote_access = true,
        .recv_needs_rts = true,
        .frames_must_match = true,
        .credit_flow = true,
        .err_breaks_dereg = true,
        .gid_types = false,
        .gid_tbl_len = 16,
        .nports = 2,
        .ports = "down,active",
        .mtu = IBV_MTU_4096,
    },
    {
        /* a Linux RoCE NIC (ConnectX-like) */
        .name = "linux-rc",
        .flavor = TBRT_FLAVOR_LINUX,
        .qp_types = (1u << IBV_QPT_RC) | (1u << IBV_QPT_UC) | (1u << IBV_QPT_UD),
        .max_qp = SOFT_MAX_QP,
        .depth_in_frames = false,
        .max_qp_wr = 32768,
        .max_msg = 1ull << 30,
        .max_mr = 1ull << 46,
        .gid_types = true,
        .gid_tbl_len = 256,
        .nports = 1,
        .ports = "active",
        .mtu = IBV_MTU_4096,
    },
};

const struct soft_personality *soft_personality_find(const char *name)
{
    for (size_t i = 0; i < TBRT_ARRAY_LEN(personalities); i++)
        if (strcmp(personalities[i].name, name) == 0)
            return &personalities[i];
    return NULL;
}

const char *soft_personality_names(void) { return "apple-uc, linux-rc"; }
