/* views.h - the engine's record of a link's open zero-copy views
 * (views.c; the contract is in tbrt.h). Kept in struct tbrt_link. */
#ifndef TBRT_VIEWS_H
#define TBRT_VIEWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tbrt_link;

struct link_views {
    bool send_open, recv_open;
    size_t send_len, recv_len;  /* bytes the open views span */
    unsigned tick;              /* liveness look every 64th commit */
    /* close with views open: the rings under them, kept addressable */
    void *keep_at[2];
    size_t keep_len[2];
};

/* Refusals for the copying calls while a view is open (link.h asks,
 * views_busy_*): 0, or -EINVAL with the link's message naming op. */
int views_refuse_send(struct tbrt_link *l, const char *op);
int views_refuse_recv(struct tbrt_link *l, const char *op);
/* close: called before the transport's teardown, and after it. A view still
 * open keeps its ring's addresses reserved (views.c). */
void views_before_teardown(struct tbrt_link *l);
void views_after_teardown(struct tbrt_link *l);

#endif
