/* abi_check.h - what the ABI check's files share (see abi_check.c). */
#ifndef ABI_CHECK_H
#define ABI_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <infiniband/verbs.h>

/* "ok NAME" or "FAIL NAME: why"; the spec looks for every ok it expects. */
void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define CHECK(cond, name, ...) check(!!(cond), name, __VA_ARGS__)
int die(const char *what);

/* A connected pair of QPs of one type in one context, with their CQs and
 * one registered buffer each. */
struct pair {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq[2];
    struct ibv_qp *qp[2];
    struct ibv_mr *mr[2];
    uint8_t *buf[2];
    int gid_index;
};
#define PAIR_BUF 65536

struct ibv_context *open_first(void);
/* The GID index of ::ffff:127.0.0.1 (RoCE v2 where typed), or -1. */
int loopback_gid(struct ibv_context *ctx);
/* Make and connect a pair; qp_ex: made with ibv_create_qp_ex and these
 * send_ops_flags (0: ibv_create_qp). cq_ex: extended CQs with wc_flags. */
int pair_open(struct pair *p, enum ibv_qp_type type, uint64_t send_ops, uint64_t cq_ex_flags);
void pair_close(struct pair *p);
/* Bring one QP of ctx to RTS facing dest_qpn (loopback GID gid_index). */
int qp_to_rts(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_qp_type type, uint32_t dest_qpn,
              int gid_index, uint32_t rq_psn, uint32_t sq_psn);
/* Poll cq for one completion within 2 s: 1, or 0 on timeout. */
int poll_one(struct ibv_cq *cq, struct ibv_wc *wc);

/* the cases */
int case_ex(void);
int case_query(void);
int case_threads(void);
int case_unsupported(void);
int case_compat(void);
int case_srq(void);

#endif
