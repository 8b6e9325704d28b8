/* libFuzzer harnesses of the native data plane, built with clang -fsanitize=fuzzer,address,
 * undefined by fuzz/native/build.py. This file is compiled as one translation unit with the C
 * that softswitch/native/cgen.py generates for the OpenGate program (OG_FUZZ_PROGRAM, which
 * includes og_dp.c) and the header fuzz/native/state.py writes (OG_FUZZ_META: each table's key
 * and actions, and the example policy's state as the P4Runtime writes built it).
 *
 * OG_FUZZ_MODE 1 ("frames"): the example policy's state is installed once; an input is frames.
 * OG_FUZZ_MODE 2 ("writes"): an input starts with table writes that build a fresh data plane's
 * tables (inserts, removes, defaults, action profile members as the P4Runtime server mirrors
 * them: og_entry_insert, og_entry_remove, og_dp_set_default, og_entry_set_members), then frames.
 *
 * Frames: up to OG_FUZZ_MAX_FRAMES records of (port selector: 1 byte, length: 2 bytes big-endian,
 * bytes), each copied into a buffer of exactly its length so that a read past its end is an
 * AddressSanitizer report. A crash is any sanitizer report or signal, or a broken invariant
 * checked here (an output longer than the output buffer, an entry that cannot be removed).
 */
#include <stdint.h>

/* Each input starts from registers of zeros: the cells it wrote are reset after it (clearing all
 * of them, 29 MB for the OpenGate program, would cost a millisecond an input). */
#define OG_FUZZ_MAX_TOUCHED 65536
static uint64_t *og_fuzz_touched[OG_FUZZ_MAX_TOUCHED];
static uint32_t og_fuzz_ntouched;
static int og_fuzz_touched_all;
static void og_fuzz_touch(uint64_t *cell);
static void og_fuzz_touch(uint64_t *cell) {
    if (og_fuzz_ntouched < OG_FUZZ_MAX_TOUCHED)
        og_fuzz_touched[og_fuzz_ntouched++] = cell;
    else
        og_fuzz_touched_all = 1;
}
#define OG_REG_WRITE_HOOK(r, i) og_fuzz_touch(&(r)[i])

#include OG_FUZZ_PROGRAM

#define OG_FUZZ_MAX_PARAMS 16
#define OG_FUZZ_MAX_FIELDS 16
#define OG_FUZZ_MAX_FRAMES 16
#define OG_FUZZ_MAX_OPS 64
#define OG_FUZZ_MAX_MEMBERS 4

typedef struct {
    uint32_t nfields;
    uint8_t kinds[OG_FUZZ_MAX_FIELDS];
    uint8_t widths[OG_FUZZ_MAX_FIELDS];
    uint32_t needs_priority;
    uint32_t impl; /* 0 direct, 1 action profile, 2 action selector */
    int32_t meter_packets; /* -1: no direct meter */
    uint32_t stride; /* words per member row: action id, then the widest action's data */
    uint32_t first_action, nactions;
} og_fuzz_table;

typedef struct {
    uint32_t id, nparams;
    uint8_t widths[OG_FUZZ_MAX_PARAMS];
} og_fuzz_action;

#include OG_FUZZ_META

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define OG_FUZZ_CHECK(cond)                                                                    \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "og_fuzz: invariant broken at line %d: %s\n", __LINE__, #cond);   \
            __builtin_trap();                                                                  \
        }                                                                                      \
    } while (0)

/* ------------------------------------------------------------------ reading the input */
typedef struct {
    const uint8_t *p;
    size_t n;
} og_rd;

static uint64_t rd_bytes(og_rd *r, unsigned nbytes) { /* big-endian, 0 past the end */
    uint64_t v = 0;
    for (unsigned i = 0; i < nbytes; i++) {
        v <<= 8;
        if (r->n) {
            v |= *r->p++;
            r->n--;
        }
    }
    return v;
}

static uint64_t rd_bits(og_rd *r, unsigned width) { /* a value of `width` bits (1..64) */
    return rd_bytes(r, (width + 7) / 8) & og_mask(width);
}

/* ------------------------------------------------------------------ frames */
static void og_fuzz_drain(og_dp *dp) {
    static uint32_t ids[64], ends[64], counts[64];
    static uint64_t values[64 * OG_DIGEST_MAX_FIELDS];
    static uint8_t buf[64 * OG_DIGEST_P4DATA_MAX];
    uint32_t k = og_dp_pop_digests_p4data(dp, ids, ends, buf, sizeof buf, 32);
    for (uint32_t i = 0; i < k; i++) {
        OG_FUZZ_CHECK(ends[i] <= sizeof buf && (i == 0 || ends[i] >= ends[i - 1]));
        OG_FUZZ_CHECK(ends[i] - (i ? ends[i - 1] : 0) <= OG_DIGEST_P4DATA_MAX);
    }
    k = og_dp_pop_digests(dp, ids, counts, values, 64);
    for (uint32_t i = 0; i < k; i++) OG_FUZZ_CHECK(counts[i] <= OG_DIGEST_MAX_FIELDS);
}

static void og_fuzz_frames(og_dp *dp, og_rd *r) {
    for (int i = 0; i < OG_FUZZ_MAX_FRAMES && r->n; i++) {
        uint32_t port = OG_FUZZ_PORTS[rd_bytes(r, 1) % OG_FUZZ_NPORTS];
        size_t len = (size_t)rd_bytes(r, 2);
        if (len > r->n) len = r->n;
        uint8_t *frame = malloc(len ? len : 1);
        if (!frame) return;
        memcpy(frame, r->p, len);
        r->p += len;
        r->n -= len;
        uint32_t out_port = 0;
        int32_t n = og_dp_process(dp, port, frame, (uint32_t)len, &out_port);
        OG_FUZZ_CHECK(n >= -1 && n <= (int32_t)OG_OBUF);
        if (n > 0) { /* the output is readable to its end */
            volatile uint8_t sink = og_dp_obuf(dp)[n - 1];
            (void)sink;
        }
        free(frame);
        og_fuzz_drain(dp);
    }
}

/* ------------------------------------------------------------------ the recorded state */
static const uint64_t *og_fuzz_replay(og_dp *dp, const uint64_t *w, og_entry **last) {
    switch (w[0]) {
    case 1: { /* INSERT */
        uint32_t ti = (uint32_t)w[1];
        uint64_t nblob = w[2];
        const uint64_t *blob = w + 3, *m = blob + nblob;
        uint32_t nmembers = (uint32_t)m[0], stride = (uint32_t)m[1], is_group = (uint32_t)m[2];
        *last = og_entry_insert(dp, ti, blob, nmembers, stride, nmembers ? m + 3 : NULL, is_group);
        OG_FUZZ_CHECK(*last != NULL);
        return m + 3 + (uint64_t)nmembers * stride;
    }
    case 2: { /* DEFAULT */
        uint32_t ti = (uint32_t)w[1], ndata = (uint32_t)w[3];
        og_entry *e = og_entry_new(ndata, -1);
        OG_FUZZ_CHECK(e != NULL);
        e->action = (int32_t)(int64_t)w[2];
        memcpy(e->data, w + 4, (size_t)ndata * sizeof(uint64_t));
        og_dp_set_default(dp, ti, e, dp->def[ti]);
        return w + 4 + ndata;
    }
    case 3: /* DIRECT_METER of the last entry */
        OG_FUZZ_CHECK(*last != NULL && (*last)->meter != NULL);
        og_meter_configure(dp, (*last)->meter, (double)w[1], (int64_t)w[2], (double)w[3],
                           (int64_t)w[4]);
        return w + 5;
    case 4: { /* METER_CELL */
        og_meter *cells = og_dp_meter(dp, (uint32_t)w[1]);
        OG_FUZZ_CHECK(cells != NULL);
        og_meter_configure(dp, &cells[w[2]], (double)w[3], (int64_t)w[4], (double)w[5],
                           (int64_t)w[6]);
        return w + 7;
    }
    default:
        OG_FUZZ_CHECK(!"unknown state record");
        return w + OG_FUZZ_STATE_WORDS;
    }
}

static void og_fuzz_install_state(og_dp *dp) {
    og_entry *last = NULL;
    const uint64_t *w = OG_FUZZ_STATE, *end = OG_FUZZ_STATE + OG_FUZZ_STATE_WORDS;
    while (w < end) w = og_fuzz_replay(dp, w, &last);
}

/* ------------------------------------------------------------------ table writes */
typedef struct {
    og_entry *e;
    uint32_t ti;
    uint32_t nwords;
    uint64_t *blob;
} og_fuzz_entry;

static const og_fuzz_action *og_fuzz_pick_action(const og_fuzz_table *t, og_rd *r) {
    if (!t->nactions) return NULL;
    return &OG_FUZZ_ACTIONS[t->first_action + rd_bytes(r, 1) % t->nactions];
}

/* Action profile members as the mirror gives them: `n` rows of stride words. */
static uint64_t *og_fuzz_members(const og_fuzz_table *t, og_rd *r, uint32_t n) {
    uint64_t *rows = calloc((size_t)(n ? n : 1) * t->stride, sizeof(uint64_t));
    if (!rows) return NULL;
    for (uint32_t i = 0; i < n; i++) {
        const og_fuzz_action *a = og_fuzz_pick_action(t, r);
        if (!a) break;
        rows[i * t->stride] = a->id;
        for (uint32_t j = 0; j < a->nparams; j++) rows[i * t->stride + 1 + j] = rd_bits(r, a->widths[j]);
    }
    return rows;
}

/* An entry as softswitch/native/dataplane.py's Mirror._blob builds it (the P4Runtime server has
 * validated it: values fit their widths, prefixes and ranges are well-formed). */
static uint64_t *og_fuzz_blob(const og_fuzz_table *t, og_rd *r, uint32_t *nwords) {
    const og_fuzz_action *a = t->impl == 0 ? og_fuzz_pick_action(t, r) : NULL;
    uint32_t ndata = a ? a->nparams : 0, n = t->nfields;
    *nwords = 2 + ndata + 4 + 2 + 4 * n;
    uint64_t *w = calloc(*nwords, sizeof(uint64_t));
    if (!w) return NULL;
    w[0] = a ? a->id : (uint64_t)-1;
    w[1] = ndata;
    for (uint32_t j = 0; j < ndata; j++) w[2 + j] = rd_bits(r, a->widths[j]);
    uint64_t *q = w + 2 + ndata;
    q[0] = (uint64_t)(int64_t)t->meter_packets;
    q[1] = 0; /* last hit, packets, bytes */
    q[2] = 0;
    q[3] = 0;
    uint64_t prio = t->needs_priority ? 1 + rd_bytes(r, 2) : 0;
    uint64_t *bits = q + 6, *mask = bits + n, *lo = mask + n, *hi = lo + n;
    for (uint32_t i = 0; i < n; i++) {
        unsigned width = t->widths[i];
        uint64_t full = og_mask(width);
        switch (t->kinds[i]) {
        case OG_MATCH_LPM: {
            unsigned plen = (unsigned)(rd_bytes(r, 1) % (width + 1));
            mask[i] = full ^ og_mask(width - plen);
            bits[i] = rd_bits(r, width) & mask[i];
            if (!t->needs_priority) prio = plen;
            break;
        }
        case OG_MATCH_TERNARY:
            mask[i] = rd_bits(r, width);
            bits[i] = rd_bits(r, width) & mask[i];
            break;
        case OG_MATCH_OPTIONAL:
            mask[i] = rd_bytes(r, 1) & 1 ? full : 0;
            bits[i] = rd_bits(r, width) & mask[i];
            break;
        case OG_MATCH_RANGE: {
            uint64_t x = rd_bits(r, width), y = rd_bits(r, width);
            lo[i] = x < y ? x : y;
            hi[i] = x < y ? y : x;
            break;
        }
        default: /* exact */
            bits[i] = rd_bits(r, width);
            mask[i] = full;
        }
    }
    q[4] = prio;
    q[5] = n;
    return w;
}

/* The key part of a blob (priority, then the key words): equal for two writes of one entry. */
static int og_fuzz_same_key(const og_fuzz_entry *x, uint32_t ti, const uint64_t *blob,
                            uint32_t nwords) {
    if (x->ti != ti) return 0;
    uint32_t kx = 2 + (uint32_t)x->blob[1] + 4, ky = 2 + (uint32_t)blob[1] + 4;
    return x->nwords - kx == nwords - ky &&
           !memcmp(x->blob + kx, blob + ky, (nwords - ky) * sizeof(uint64_t));
}

static void og_fuzz_writes(og_dp *dp, og_rd *r, og_fuzz_entry *live, uint32_t *nlive) {
    uint32_t nops = (uint32_t)rd_bytes(r, 1) % (OG_FUZZ_MAX_OPS + 1);
    for (uint32_t op = 0; op < nops && r->n; op++) {
        uint32_t kind = (uint32_t)rd_bytes(r, 1) % 4;
        if (kind == 1 && *nlive) { /* remove */
            uint32_t k = (uint32_t)rd_bytes(r, 1) % *nlive;
            og_fuzz_entry x = live[k];
            OG_FUZZ_CHECK(og_entry_remove(dp, x.ti, x.e, x.blob) == 0);
            free(x.blob);
            live[k] = live[--*nlive];
            continue;
        }
        if (kind == 3 && *nlive) { /* the members of an indirect entry change */
            og_fuzz_entry *x = &live[rd_bytes(r, 1) % *nlive];
            const og_fuzz_table *t = &OG_FUZZ_TABLES[x->ti];
            if (!t->impl) continue;
            uint32_t n = t->impl == 2 ? (uint32_t)rd_bytes(r, 1) % (OG_FUZZ_MAX_MEMBERS + 1) : 1;
            uint64_t *rows = og_fuzz_members(t, r, n);
            if (!rows) continue;
            OG_FUZZ_CHECK(og_entry_set_members(dp, x->e, n, t->stride, rows, t->impl == 2) == 0);
            free(rows);
            continue;
        }
        uint32_t ti = (uint32_t)rd_bytes(r, 2) % OG_FUZZ_NTABLES;
        const og_fuzz_table *t = &OG_FUZZ_TABLES[ti];
        if (kind == 2) { /* the default action */
            const og_fuzz_action *a = og_fuzz_pick_action(t, r);
            if (!a) continue;
            og_entry *e = og_entry_new(a->nparams, -1);
            OG_FUZZ_CHECK(e != NULL);
            e->action = (int32_t)a->id;
            for (uint32_t j = 0; j < a->nparams; j++) e->data[j] = rd_bits(r, a->widths[j]);
            og_dp_set_default(dp, ti, e, dp->def[ti]);
            continue;
        }
        /* insert (the P4Runtime server refuses a keyless table's entry and a duplicate key) */
        if (!t->nfields || *nlive >= OG_FUZZ_MAX_OPS) continue;
        uint32_t nwords;
        uint64_t *blob = og_fuzz_blob(t, r, &nwords);
        if (!blob) continue;
        int dup = 0;
        for (uint32_t k = 0; k < *nlive && !dup; k++) dup = og_fuzz_same_key(&live[k], ti, blob, nwords);
        if (dup) {
            free(blob);
            continue;
        }
        uint32_t n = t->impl == 2 ? (uint32_t)rd_bytes(r, 1) % (OG_FUZZ_MAX_MEMBERS + 1) : t->impl;
        uint64_t *rows = t->impl ? og_fuzz_members(t, r, n) : NULL;
        og_entry *e = og_entry_insert(dp, ti, blob, t->impl ? n : 0, t->impl ? t->stride : 0,
                                      rows, t->impl == 2);
        free(rows);
        OG_FUZZ_CHECK(e != NULL);
        live[*nlive] = (og_fuzz_entry){e, ti, nwords, blob};
        ++*nlive;
    }
}

/* ------------------------------------------------------------------ the targets */
static og_dp *og_fuzz_dp;

static void og_fuzz_reset_registers(og_dp *dp) {
    if (og_fuzz_touched_all) {
        og_dp_clear_registers(dp);
    } else {
        for (uint32_t i = 0; i < og_fuzz_ntouched; i++) *og_fuzz_touched[i] = 0;
    }
    og_fuzz_ntouched = 0;
    og_fuzz_touched_all = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    og_fuzz_dp = og_dp_new();
    OG_FUZZ_CHECK(og_fuzz_dp != NULL);
#if OG_FUZZ_MODE == 1
    og_fuzz_install_state(og_fuzz_dp);
#endif
    return 0;
}

#if OG_FUZZ_MODE == 1
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    og_rd r = {data, size};
    og_fuzz_frames(og_fuzz_dp, &r);
    og_fuzz_reset_registers(og_fuzz_dp);
    return 0;
}
#elif OG_FUZZ_MODE == 2
/* One data plane for every input, left as new after each: no entry, no default, registers 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    og_rd r = {data, size};
    og_dp *dp = og_fuzz_dp;
    og_fuzz_entry live[OG_FUZZ_MAX_OPS];
    uint32_t nlive = 0;
    og_fuzz_writes(dp, &r, live, &nlive);
    og_fuzz_frames(dp, &r);
    for (uint32_t k = 0; k < nlive; k++) { /* every entry leaves its table cleanly */
        OG_FUZZ_CHECK(og_entry_remove(dp, live[k].ti, live[k].e, live[k].blob) == 0);
        free(live[k].blob);
    }
    for (uint32_t i = 0; i < OG_NTABLES; i++)
        if (dp->def[i]) og_dp_set_default(dp, i, NULL, dp->def[i]);
    for (uint32_t i = 0; i < OG_NTABLES; i++) OG_FUZZ_CHECK(og_table_size(dp->t[i]) == 0);
    og_fuzz_reset_registers(dp);
    return 0;
}
#else
#error "OG_FUZZ_MODE must be 1 (frames) or 2 (writes)"
#endif
