/* The run-time support of a pipeline compiled to C by softswitch/native/cgen.py.
 *
 * The generated translation unit includes this file (and og_table.h); nothing here knows any P4
 * program. It holds what every compiled program needs: bit access to packet bytes, the hash
 * algorithms of the BMv2 JSON format (as softswitch/hashes.py defines them), the two-rate
 * three-colour meter (as softswitch/externs.py's Meter), table entries as the Python P4Runtime
 * server mirrors them into C, and a bounded ring of digests for the slow path.
 */
#ifndef OG_RT_H
#define OG_RT_H

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "og_table.h"

#define OG_LIKELY(x) __builtin_expect(!!(x), 1)
#define OG_UNLIKELY(x) __builtin_expect(!!(x), 0)

static inline int64_t og_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ------------------------------------------------------------------ bits */
static inline uint64_t og_mask(unsigned w) { return w >= 64 ? ~0ULL : ((1ULL << w) - 1); }
static inline uint64_t og_shl(uint64_t a, uint64_t b) { return b >= 64 ? 0 : a << b; }
static inline uint64_t og_shr(uint64_t a, uint64_t b) { return b >= 64 ? 0 : a >> b; }
static inline uint64_t og_div(uint64_t a, uint64_t b) { return b ? a / b : 0; }
/* Register cells: reads out of range give 0, writes out of range are ignored (as BMv2). A build
 * may define OG_REG_WRITE_HOOK(r, i) to see each write (fuzz/native/og_fuzz.c resets only the
 * cells an input wrote). */
#ifndef OG_REG_WRITE_HOOK
#define OG_REG_WRITE_HOOK(r, i) ((void)0)
#endif
static inline uint64_t og_reg_read(const uint64_t *r, uint64_t size, uint64_t i) {
    return i < size ? r[i] : 0;
}
static inline void og_reg_write(uint64_t *r, uint64_t size, uint64_t i, uint64_t v) {
    if (i < size) {
        OG_REG_WRITE_HOOK(r, i);
        r[i] = v;
    }
}
static inline uint64_t og_mod(uint64_t a, uint64_t b) { return b ? a % b : 0; }

/* `w` bits (1..64) of `d` starting `off` bits in (big-endian bit order). */
static inline uint64_t og_get_bits(const uint8_t *d, unsigned off, unsigned w) {
    const uint8_t *q = d + (off >> 3);
    unsigned first = off & 7, nbytes = (first + w + 7) >> 3;
    unsigned __int128 v = 0;
    for (unsigned i = 0; i < nbytes; i++) v = (v << 8) | q[i];
    v >>= (nbytes * 8 - first - w);
    return (uint64_t)v & og_mask(w);
}

/* Write the low `w` bits (1..64) of `v` at `off` bits into `d`, other bits untouched. */
static inline void og_put_bits(uint8_t *d, unsigned off, unsigned w, uint64_t v) {
    uint8_t *q = d + (off >> 3);
    unsigned first = off & 7, nbytes = (first + w + 7) >> 3, shift = nbytes * 8 - first - w;
    unsigned __int128 cur = 0;
    for (unsigned i = 0; i < nbytes; i++) cur = (cur << 8) | q[i];
    unsigned __int128 m = ((unsigned __int128)og_mask(w)) << shift;
    cur = (cur & ~m) | (((unsigned __int128)(v & og_mask(w))) << shift);
    for (int i = (int)nbytes - 1; i >= 0; i--) {
        q[i] = (uint8_t)cur;
        cur >>= 8;
    }
}

/* ------------------------------------------------------------------ hashes (bm_sim/calculations.cpp) */
static inline uint64_t og_crc16(const uint8_t *d, uint32_t n) { /* reflected 0x8005, init 0 */
    uint32_t rem = 0;
    for (uint32_t i = 0; i < n; i++) {
        rem ^= d[i];
        for (int b = 0; b < 8; b++) rem = (rem & 1) ? (rem >> 1) ^ 0xA001 : rem >> 1;
    }
    return rem & 0xFFFF;
}

static uint32_t og_crc32_table[256];
static pthread_once_t og_crc32_once = PTHREAD_ONCE_INIT;
static void og_crc32_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int b = 0; b < 8; b++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        og_crc32_table[i] = c;
    }
}
static inline uint64_t og_crc32(const uint8_t *d, uint32_t n) { /* zlib's crc32 */
    uint32_t c = 0xFFFFFFFFu;
    for (uint32_t i = 0; i < n; i++) c = og_crc32_table[(c ^ d[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}
static inline uint64_t og_crc_ccitt(const uint8_t *d, uint32_t n) { /* binascii.crc_hqx(d, 0xffff) */
    uint32_t rem = 0xFFFF;
    for (uint32_t i = 0; i < n; i++) {
        rem ^= (uint32_t)d[i] << 8;
        for (int b = 0; b < 8; b++) rem = (rem & 0x8000) ? ((rem << 1) ^ 0x1021) : (rem << 1);
        rem &= 0xFFFF;
    }
    return rem;
}
static inline uint64_t og_csum16(const uint8_t *d, uint32_t n) { /* RFC 1071 */
    uint64_t s = 0;
    uint32_t i = 0;
    for (; i + 1 < n; i += 2) s += ((uint32_t)d[i] << 8) | d[i + 1];
    if (i < n) s += (uint32_t)d[i] << 8;
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    return (~s) & 0xFFFF;
}
static inline uint64_t og_identity(const uint8_t *d, uint32_t n) {
    uint64_t v = 0;
    for (uint32_t i = 0; i < n && i < 8; i++) v = (v << 8) | d[i];
    return v;
}
static inline uint64_t og_xor16(const uint8_t *d, uint32_t n) {
    uint64_t out = 0;
    uint32_t i = 0;
    for (; i + 1 < n; i += 2) out ^= ((uint32_t)d[i] << 8) | d[i + 1];
    if (i < n) out ^= (uint32_t)d[i] << 8;
    return out;
}
static inline uint64_t og_xor32(const uint8_t *d, uint32_t n) {
    uint64_t out = 0;
    uint32_t i = 0;
    for (; i + 3 < n; i += 4)
        out ^= ((uint64_t)d[i] << 24) | ((uint64_t)d[i + 1] << 16) | ((uint64_t)d[i + 2] << 8) | d[i + 3];
    if (i < n) {
        uint64_t t = 0;
        for (uint32_t k = 0; k < 4; k++) t = (t << 8) | (i + k < n ? d[i + k] : 0);
        out ^= t;
    }
    return out;
}

/* ------------------------------------------------------------------ meters (softswitch.externs.Meter) */
enum { OG_GREEN = 0, OG_YELLOW = 1, OG_RED = 2 };

typedef struct og_meter {
    int32_t configured;
    int32_t packets; /* counts packets, not bytes */
    double rate[2];  /* per second: [0] peak (red), [1] committed (yellow) */
    int64_t burst[2];
    int64_t tokens[2];
    int64_t tokens_last[2];
    int64_t origin;
} og_meter;

/* The colour of `nbytes` arriving at `now` (CLOCK_MONOTONIC ns). */
static inline uint64_t og_meter_execute(og_meter *m, uint32_t nbytes, int64_t now) {
    if (!m->configured) return OG_GREEN;
    int64_t amount = m->packets ? 1 : nbytes;
    int64_t elapsed = now - m->origin;
    static const int colours[2] = {OG_RED, OG_YELLOW};
    for (int i = 0; i < 2; i++) {
        int64_t since = (int64_t)((double)elapsed * m->rate[i] / 1e9);
        int64_t fresh = since - m->tokens_last[i];
        m->tokens_last[i] = since;
        int64_t tokens = m->tokens[i] + fresh;
        if (tokens > m->burst[i]) tokens = m->burst[i];
        if (tokens < amount) {
            m->tokens[i] = tokens;
            return (uint64_t)colours[i];
        }
        m->tokens[i] = tokens - amount;
    }
    return OG_GREEN;
}

/* ------------------------------------------------------------------ table entries */
/* What a table lookup returns. The Python P4Runtime server creates, fills and frees entries
 * (og_entry_new, og_entry_set_*); direct counters, the last hit and the direct meter live here
 * and Python reads them in place. */
typedef struct og_entry {
    uint64_t packets, bytes; /* direct counter */
    int64_t last_hit;        /* CLOCK_MONOTONIC ns of the last hit */
    og_meter *meter;         /* direct meter, or NULL */
    int32_t action;          /* direct: action id; indirect: -1 */
    uint32_t nmembers;       /* indirect: choices (0: an empty group) */
    uint32_t stride;         /* words per choice: action id, then its data */
    uint32_t is_group;       /* indirect: choose by the selector's hash */
    uint64_t *members;       /* indirect: nmembers * stride words */
    uint32_t ndata;
    uint32_t pad_;
    uint64_t data[];         /* direct: action data */
} og_entry;

/* ------------------------------------------------------------------ packets */
typedef struct og_pkt {
    const uint8_t *data;
    uint32_t len;    /* bytes in data */
    uint32_t pos;    /* parser cursor */
    uint32_t ilen;   /* length as received */
    int64_t length;  /* packet_length as headers are added and removed */
    int64_t now;     /* CLOCK_MONOTONIC ns at arrival: time stamps, last hits, meters */
    int32_t exit_;
    int32_t learn_id;
} og_pkt;

/* ------------------------------------------------------------------ digests */
#define OG_DIGEST_RING 65536 /* about 2 s of new flows at 32k/s: a burst waits for the slow path, not lost */
#define OG_DIGEST_MAX_FIELDS 32
typedef struct og_digest {
    uint32_t id;
    uint32_t n;
    uint64_t v[OG_DIGEST_MAX_FIELDS];
} og_digest;

typedef struct og_digest_ring {
    og_digest *items;
    uint32_t head, tail; /* under the data plane's lock */
    uint64_t drops;
} og_digest_ring;

static inline void og_digest_push(og_digest_ring *r, uint32_t id, uint32_t n, const uint64_t *v) {
    uint32_t next = (r->head + 1) % OG_DIGEST_RING;
    if (next == r->tail) {
        r->drops++;
        return;
    }
    og_digest *d = &r->items[r->head];
    d->id = id;
    d->n = n;
    memcpy(d->v, v, n * sizeof(uint64_t));
    r->head = next;
}

#endif
