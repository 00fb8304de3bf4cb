/* faults_parse.c - the syntax of fault sets (faults.h lists it): TBRT_FAULTS
 * and soft_faults_set, "drop=1%,delay=200us,jitter=50us,seed=7;qp=12,...".
 * Units are named as tc netem names them; a value without its unit, an
 * unknown key or a value out of range is refused with a message naming it,
 * and nothing changes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "soft/wire/faults.h"
#include "util/util.h"

#define KNOWN "drop=P%, drop_every=N, corrupt=P%, duplicate=P%, reorder=P%, window=N, " \
              "delay=T, jitter=T, distribution=uniform|normal|pareto|paretonormal, rate=R, " \
              "partition=tx|rx|both[:T], seed=N, qp=N, dir=tx|rx|both"

static int bad(char *why, size_t len, const char *fmt, const char *key, const char *v)
{
    char m[256];
    snprintf(m, sizeof m, fmt, key, v);
    return err_set(why, len, EINVAL, "%s", m);
}

/* "1%" / "0.5%" -> a threshold on a 64-bit hash. */
static int percent(const char *key, const char *v, uint64_t *out, char *why, size_t len)
{
    char *end;
    double p = strtod(v, &end);
    if (end == v || strcmp(end, "%") != 0 || !(p >= 0 && p <= 100))
        return bad(why, len, "%s=%s is not a percentage 0%%..100%% (like 1%% or 0.1%%)", key, v);
    *out = p >= 100 ? UINT64_MAX : (uint64_t)(p / 100.0 * 18446744073709551616.0);
    return 0;
}

/* "200us" -> ns (netem's time units; a bare number is refused: which unit?) */
static int duration(const char *key, const char *v, uint64_t *out, char *why, size_t len)
{
    char *end;
    double t = strtod(v, &end);
    static const struct { const char *u; double ns; } units[] = {
        {"ns", 1}, {"us", 1e3}, {"usec", 1e3}, {"ms", 1e6}, {"msec", 1e6}, {"s", 1e9},
        {"sec", 1e9},
    };
    if (end != v && t >= 0 && t <= 3600)
        for (size_t i = 0; i < TBRT_ARRAY_LEN(units); i++)
            if (strcmp(end, units[i].u) == 0) {
                *out = (uint64_t)(t * units[i].ns);
                return 0;
            }
    return bad(why, len, "%s=%s is not a time with its unit (ns, us, ms, s; like 200us), "
               "at most 1 hour", key, v);
}

/* "100mbit" -> bytes per second (netem: bit/kbit/mbit/gbit are bits, bps/kbps/
 * mbps/gbps bytes, per second; k = 1000) */
static int rate(const char *key, const char *v, uint64_t *out, char *why, size_t len)
{
    char *end;
    double r = strtod(v, &end);
    static const struct { const char *u; double Bps; } units[] = {
        {"bit", 1.0 / 8}, {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8},
        {"bps", 1}, {"kbps", 1e3}, {"mbps", 1e6}, {"gbps", 1e9},
    };
    if (end != v && r > 0)
        for (size_t i = 0; i < TBRT_ARRAY_LEN(units); i++)
            if (strcasecmp(end, units[i].u) == 0 && r * units[i].Bps >= 1) {
                *out = (uint64_t)(r * units[i].Bps);
                return 0;
            }
    return bad(why, len, "%s=%s is not a rate with its unit (bit, kbit, mbit, gbit per "
               "second, or bps, kbps, mbps, gbps bytes per second; like 100mbit)", key, v);
}

static int count(const char *key, const char *v, uint64_t max, uint64_t *out, char *why,
                 size_t len)
{
    char *end;
    unsigned long long n = strtoull(v, &end, 0);
    if (end == v || *end || n > max || v[0] == '-')
        return bad(why, len, "%s=%s is not a whole number in range", key, v);
    *out = n;
    return 0;
}

static int direction(const char *key, const char *v, uint8_t *out, char *why, size_t len)
{
    if (strcmp(v, "tx") == 0)
        *out = SOFT_FAULT_TX;
    else if (strcmp(v, "rx") == 0)
        *out = SOFT_FAULT_RX;
    else if (strcmp(v, "both") == 0)
        *out = SOFT_FAULT_BOTH;
    else
        return bad(why, len, "%s=%s: a direction is tx, rx or both", key, v);
    return 0;
}

static int one(struct soft_fault_set *s, char *kv, char *why, size_t len)
{
    char *eq = strchr(kv, '=');
    if (!eq)
        return bad(why, len, "\"%s\" is not key=value%s", kv, "");
    *eq = 0;
    const char *k = kv, *v = eq + 1;
    uint64_t n;
    int rc = 0;
    if (strcmp(k, "drop") == 0)
        rc = percent(k, v, &s->drop_below, why, len);
    else if (strcmp(k, "corrupt") == 0)
        rc = percent(k, v, &s->corrupt_below, why, len);
    else if (strcmp(k, "duplicate") == 0)
        rc = percent(k, v, &s->dup_below, why, len);
    else if (strcmp(k, "reorder") == 0)
        rc = percent(k, v, &s->reorder_below, why, len);
    else if (strcmp(k, "drop_every") == 0) {
        rc = count(k, v, 1u << 30, &n, why, len);
        if (!rc && n < 1)
            rc = bad(why, len, "%s=%s: every Nth needs N >= 1", k, v);
        s->drop_every = (uint32_t)n;
    } else if (strcmp(k, "window") == 0) {
        rc = count(k, v, 1024, &n, why, len);
        s->window = (uint32_t)n;
    } else if (strcmp(k, "delay") == 0)
        rc = duration(k, v, &s->delay_ns, why, len);
    else if (strcmp(k, "jitter") == 0)
        rc = duration(k, v, &s->jitter_ns, why, len);
    else if (strcmp(k, "distribution") == 0) {
        static const char *names[] = {"uniform", "normal", "pareto", "paretonormal"};
        rc = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(v, names[i]) == 0) {
                s->dist = (uint8_t)i;
                rc = 0;
            }
        if (rc)
            rc = bad(why, len, "%s=%s: distributions are uniform, normal, pareto, paretonormal "
                     "(tc netem's names)", k, v);
    } else if (strcmp(k, "rate") == 0)
        rc = rate(k, v, &s->rate_Bps, why, len);
    else if (strcmp(k, "partition") == 0) {
        char d[16];
        const char *colon = strchr(v, ':');
        size_t dl = colon ? (size_t)(colon - v) : strlen(v);
        snprintf(d, sizeof d, "%.*s", (int)(dl < 15 ? dl : 15), v);
        rc = direction(k, d, &s->partition, why, len);
        if (!rc && colon) {
            rc = duration(k, colon + 1, &n, why, len);
            s->heal_ns = rc ? 0 : now_ns() + n;
        }
    } else if (strcmp(k, "seed") == 0)
        rc = count(k, v, UINT64_MAX, &s->seed, why, len);
    else if (strcmp(k, "qp") == 0) {
        rc = count(k, v, 0xffffff, &n, why, len);
        s->qpn = (uint32_t)n;
    } else if (strcmp(k, "dir") == 0)
        rc = direction(k, v, &s->dir, why, len);
    else
        return err_set(why, len, EINVAL, "unknown fault \"%s\" (known: %s)", k, KNOWN);
    return rc;
}

int soft_faults_set(struct soft_faults *f, const char *spec, char *why, size_t len)
{
    struct soft_fault_set sets[SOFT_FAULT_SETS];
    int n = 0;
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        return err_set(why, len, EINVAL, "fault spec longer than %zu characters", sizeof buf - 1);
    str_copy(buf, sizeof buf, spec);
    char *save = NULL;
    for (char *set = strtok_r(buf, ";", &save); set; set = strtok_r(NULL, ";", &save)) {
        if (n == SOFT_FAULT_SETS)
            return err_set(why, len, EINVAL, "more than %d fault sets", SOFT_FAULT_SETS);
        struct soft_fault_set *s = &sets[n];
        memset(s, 0, sizeof *s);
        s->dir = SOFT_FAULT_TX;
        bool any = false;
        char *save2 = NULL;
        for (char *kv = strtok_r(set, ",", &save2); kv; kv = strtok_r(NULL, ",", &save2)) {
            while (*kv == ' ')
                kv++;
            if (!*kv)
                continue;
            int rc = one(s, kv, why, len);
            if (rc)
                return rc;
            any = true;
        }
        if (any)
            n++;
    }
    memcpy(f->sets, sets, (size_t)n * sizeof sets[0]);
    f->nsets = n;
    f->active = n > 0;
    str_copy(f->spec, sizeof f->spec, spec);
    return 0;
}
