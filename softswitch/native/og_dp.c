/* The exported API of a compiled program (declared in og_dp.h, bound by
 * softswitch/native/dataplane.py with ctypes). Included at the end of the generated file, after
 * og_walk and og_dp_init_objects. */

static inline uint64_t og_rng_between(og_dp *dp, uint64_t lo, uint64_t hi) {
    uint64_t x = dp->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    dp->rng = x;
    if (hi <= lo) return lo;
    uint64_t span = hi - lo + 1;
    return span ? lo + x % span : x;
}

OG_API og_dp *og_dp_new(void) {
    pthread_once(&og_crc32_once, og_crc32_init);
    og_dp *dp = calloc(1, sizeof(og_dp));
    if (!dp) return NULL;
    pthread_mutex_init(&dp->lock, NULL);
    dp->start_ns = og_now_ns();
    dp->rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)dp->start_ns;
    dp->digests.items = calloc(OG_DIGEST_RING, sizeof(og_digest));
    og_dp_init_objects(dp);
    return dp;
}

OG_API void og_dp_free(og_dp *dp) {
    if (!dp) return;
    if (dp->io) og_io_free(dp->io);
    for (int i = 0; i < OG_NTABLES; i++)
        if (dp->t[i]) og_table_free(dp->t[i]);
    for (int i = 0; i < OG_NREGS; i++) free(dp->reg[i]);
    for (int i = 0; i < OG_NCTRS; i++) free(dp->ctr[i]);
    for (int i = 0; i < OG_NMTRS; i++) free(dp->mtr[i]);
    free(dp->digests.items);
    pthread_mutex_destroy(&dp->lock);
    free(dp);
}

/* Every function Python calls that changes state packets read takes dp->lock itself, for the
 * change only: Python never holds it, so a Python thread waiting for the GIL cannot hold up the
 * polling thread. */

/* One frame through the pipeline under the data plane's lock: the output frame's length in obuf
 * (-1: dropped). *fresh_digests tells whether the frame made the digest ring non-empty. */
static int32_t og_dp_run(og_dp *dp, uint32_t port, const uint8_t *data, uint32_t len,
                         uint8_t *obuf, uint32_t *out_port, int *fresh_digests) {
    pthread_mutex_lock(&dp->lock);
    int had_digests = dp->digests.head != dp->digests.tail;
    int32_t n = og_walk(dp, port, data, len, obuf, out_port);
    *fresh_digests = !had_digests && dp->digests.head != dp->digests.tail;
    pthread_mutex_unlock(&dp->lock);
    return n;
}

/* One frame through the switch, from Python; the output frame (length returned, -1 if dropped)
 * is in og_dp_obuf(dp) until the next call. Python serialises its own calls. */
OG_API int32_t og_dp_process(og_dp *dp, uint32_t port, const uint8_t *data, uint32_t len,
                             uint32_t *out_port) {
    int fresh;
    return og_dp_run(dp, port, data, len, dp->obuf_py, out_port, &fresh);
}

OG_API uint8_t *og_dp_obuf(og_dp *dp) { return dp->obuf_py; }

/* The same, for the polling thread of og_io: no Python anywhere. */
static uint32_t og_dp_io_process(void *ctx, uint32_t in_port, const uint8_t *frame, uint32_t len,
                                 og_frame *out, uint32_t max_out) {
    og_dp *dp = ctx;
    uint32_t port = 0;
    int fresh;
    if (!max_out) return 0;
    int32_t n = og_dp_run(dp, in_port, frame, len, dp->obuf_io, &port, &fresh);
    if (fresh && dp->io) og_io_notify(dp->io); /* the slow path has digests to read */
    if (n <= 0) return 0; /* dropped, or nothing left to send */
    out[0].port = port;
    out[0].len = (uint32_t)n;
    out[0].data = dp->obuf_io;
    return 1;
}

/* Attach Linux interfaces as ports and start the polling thread. 0, or -1 with err filled. */
OG_API int og_dp_io_open(og_dp *dp, uint32_t nports, const uint32_t *port_nums,
                         const char *const *ifnames, char *err, uint32_t errlen) {
    if (dp->io) return 0;
    og_io *io = og_io_new(nports, port_nums, ifnames, og_dp_io_process, dp, err, errlen);
    if (!io) return -1;
    dp->io = io;
    int rc = og_io_start(io);
    if (rc) {
        snprintf(err, errlen, "cannot start the polling thread: %s", strerror(-rc));
        og_io_free(io);
        dp->io = NULL;
        return -1;
    }
    return 0;
}

OG_API og_io *og_dp_io(og_dp *dp) { return dp->io; }

OG_API void og_dp_io_close(og_dp *dp) {
    if (dp->io) {
        og_io_free(dp->io);
        dp->io = NULL;
    }
}

/* Up to `max` digests at once, under one taking of the lock: digest i's learn id in ids[i], its
 * field count in counts[i] and its fields in values[i * OG_DIGEST_MAX_FIELDS ...]. Returns how
 * many (0: none). One call per digest from Python was what limited the slow path above 32,000
 * new flows/s. */
OG_API uint32_t og_dp_pop_digests(og_dp *dp, uint32_t *ids, uint32_t *counts, uint64_t *values,
                                  uint32_t max) {
    uint32_t k = 0;
    pthread_mutex_lock(&dp->lock);
    og_digest_ring *r = &dp->digests;
    while (k < max && r->tail != r->head) {
        og_digest *d = &r->items[r->tail];
        ids[k] = d->id;
        counts[k] = d->n;
        memcpy(values + (size_t)k * OG_DIGEST_MAX_FIELDS, d->v, (size_t)d->n * sizeof(uint64_t));
        r->tail = (r->tail + 1) % OG_DIGEST_RING;
        k++;
    }
    pthread_mutex_unlock(&dp->lock);
    return k;
}

/* Protocol buffer wire format of P4Runtime's P4Data (p4/v1/p4data.proto): a digest sample is
 * P4Data{struct = 5: P4StructLike{members = 1: P4Data{bitstring = 1: canonical bytes}...}}, the
 * bitstring in P4Runtime's canonical form (shortest big-endian, one byte for zero).
 * tests/softswitch/test_digest_encoding.py holds these bytes to protobuf's own encoding. */
#define OG_PB_LEN(field) ((uint8_t)(((field) << 3) | 2))
#define OG_P4DATA_BITSTRING 1
#define OG_P4DATA_STRUCT 5
#define OG_P4STRUCT_MEMBERS 1
/* the most one encoded sample takes: per field 2 tag/length bytes around 2 more and 8 of value;
 * the struct's tag and a length of up to two varint bytes */
#define OG_DIGEST_P4DATA_MAX (3 + OG_DIGEST_MAX_FIELDS * 12)

static uint8_t *og_put_varint(uint8_t *p, uint32_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* One sample's fields as an encoded P4Data struct at `out`; returns its length. */
static uint32_t og_digest_p4data(const og_digest *d, uint8_t *out) {
    uint8_t body[OG_DIGEST_MAX_FIELDS * 12];
    uint8_t *p = body;
    for (uint32_t i = 0; i < d->n; i++) {
        uint64_t v = d->v[i];
        uint32_t nbytes = 1;
        while (nbytes < 8 && (v >> (8 * nbytes)) != 0) nbytes++;
        *p++ = OG_PB_LEN(OG_P4STRUCT_MEMBERS);
        *p++ = (uint8_t)(nbytes + 2); /* the member: its bitstring's tag, length and bytes */
        *p++ = OG_PB_LEN(OG_P4DATA_BITSTRING);
        *p++ = (uint8_t)nbytes;
        for (uint32_t b = nbytes; b-- > 0;) *p++ = (uint8_t)(v >> (8 * b));
    }
    uint8_t *q = out;
    *q++ = OG_PB_LEN(OG_P4DATA_STRUCT);
    q = og_put_varint(q, (uint32_t)(p - body));
    memcpy(q, body, (size_t)(p - body));
    return (uint32_t)(q - out) + (uint32_t)(p - body);
}

/* As og_dp_pop_digests, but each sample comes encoded as the P4Data a P4Runtime DigestList
 * carries, so that the slow path spends no Python on building protocol buffers: sample i's learn
 * id in ids[i], its bytes in buf from ends[i-1] (0 for the first) to ends[i]. Takes at most
 * `max`, and no more than fit in `cap` bytes. */
OG_API uint32_t og_dp_pop_digests_p4data(og_dp *dp, uint32_t *ids, uint32_t *ends, uint8_t *buf,
                                         uint32_t cap, uint32_t max) {
    uint32_t k = 0, used = 0;
    pthread_mutex_lock(&dp->lock);
    og_digest_ring *r = &dp->digests;
    while (k < max && r->tail != r->head && cap - used >= OG_DIGEST_P4DATA_MAX) {
        og_digest *d = &r->items[r->tail];
        ids[k] = d->id;
        used += og_digest_p4data(d, buf + used);
        ends[k] = used;
        r->tail = (r->tail + 1) % OG_DIGEST_RING;
        k++;
    }
    pthread_mutex_unlock(&dp->lock);
    return k;
}

/* A digest pushed as the pipeline pushes one (tests of the encoding above). */
OG_API void og_dp_push_digest(og_dp *dp, uint32_t id, uint32_t n, const uint64_t *values) {
    if (n > OG_DIGEST_MAX_FIELDS) return;
    pthread_mutex_lock(&dp->lock);
    og_digest_push(&dp->digests, id, n, values);
    pthread_mutex_unlock(&dp->lock);
}

/* Digests lost because the ring was full (the slow path did not keep up). */
OG_API uint64_t og_dp_digest_drops(og_dp *dp) { return dp->digests.drops; }

/* Every register cell to 0 (a fresh start for benchmarks and tests). */
OG_API void og_dp_clear_registers(og_dp *dp) {
    pthread_mutex_lock(&dp->lock);
    for (int i = 0; i < OG_NREGS; i++)
        if (dp->reg[i]) memset(dp->reg[i], 0, dp->reg_size[i] * sizeof(uint64_t));
    pthread_mutex_unlock(&dp->lock);
}

/* Set table i's default entry (NULL: none) under the lock, and free the one it replaces
 * (`old`, NULL if none) once no packet can be using it. */
OG_API void og_dp_set_default(og_dp *dp, uint32_t i, og_entry *e, og_entry *old) {
    pthread_mutex_lock(&dp->lock);
    if (i < OG_NTABLES) dp->def[i] = e;
    pthread_mutex_unlock(&dp->lock);
    if (old) og_entry_free(old);
}
OG_API uint64_t *og_dp_register(og_dp *dp, uint32_t i) { return i < OG_NREGS ? dp->reg[i] : NULL; }
OG_API uint64_t *og_dp_counter(og_dp *dp, uint32_t i) { return i < OG_NCTRS ? dp->ctr[i] : NULL; }
OG_API og_meter *og_dp_meter(og_dp *dp, uint32_t i) { return i < OG_NMTRS ? dp->mtr[i] : NULL; }

/* ------------------------------------------------------------------ entries and meters */
OG_API og_entry *og_entry_new(uint32_t ndata, int32_t meter_packets) {
    og_entry *e = calloc(1, sizeof(og_entry) + (size_t)ndata * sizeof(uint64_t));
    if (!e) return NULL;
    e->ndata = ndata;
    e->action = -1;
    if (meter_packets >= 0) {
        e->meter = calloc(1, sizeof(og_meter));
        if (!e->meter) {
            free(e);
            return NULL;
        }
        e->meter->packets = meter_packets;
    }
    return e;
}

OG_API void og_entry_free(og_entry *e) {
    if (!e) return;
    free(e->meter);
    free(e->members);
    free(e);
}

static void og_entry_put_members(og_entry *e, uint64_t *copy, uint32_t n, uint32_t stride,
                                 uint32_t is_group) {
    e->members = copy;
    e->nmembers = n;
    e->stride = stride;
    e->is_group = is_group;
}

static int og_members_copy(uint32_t n, uint32_t stride, const uint64_t *words, uint64_t **copy) {
    *copy = NULL;
    if (!n) return 0;
    *copy = malloc((size_t)n * stride * sizeof(uint64_t));
    if (!*copy) return -1;
    memcpy(*copy, words, (size_t)n * stride * sizeof(uint64_t));
    return 0;
}

/* Replace the members (action profile member or group) of an entry that is in a table: the swap
 * under the lock, since packets read them; the old copy freed after. */
OG_API int og_entry_set_members(og_dp *dp, og_entry *e, uint32_t n, uint32_t stride,
                                const uint64_t *words, uint32_t is_group) {
    uint64_t *copy;
    if (og_members_copy(n, stride, words, &copy)) return -1;
    pthread_mutex_lock(&dp->lock);
    uint64_t *old = e->members;
    og_entry_put_members(e, copy, n, stride, is_group);
    pthread_mutex_unlock(&dp->lock);
    free(old);
    return 0;
}

OG_API void og_meter_configure(og_dp *dp, og_meter *m, double cir, int64_t cburst, double pir,
                               int64_t pburst) {
    pthread_mutex_lock(&dp->lock);
    m->rate[0] = pir;
    m->burst[0] = pburst;
    m->rate[1] = cir;
    m->burst[1] = cburst;
    m->tokens[0] = pburst;
    m->tokens[1] = cburst;
    m->tokens_last[0] = m->tokens_last[1] = 0;
    m->origin = og_now_ns();
    m->configured = 1;
    pthread_mutex_unlock(&dp->lock);
}

OG_API void og_meter_clear(og_dp *dp, og_meter *m) {
    pthread_mutex_lock(&dp->lock);
    m->configured = 0;
    pthread_mutex_unlock(&dp->lock);
}

OG_API uint32_t og_meter_execute_api(og_dp *dp, og_meter *m, uint32_t nbytes) {
    pthread_mutex_lock(&dp->lock);
    uint32_t color = (uint32_t)og_meter_execute(m, nbytes, og_now_ns());
    pthread_mutex_unlock(&dp->lock);
    return color;
}

OG_API uint32_t og_sizeof_entry(void) { return (uint32_t)sizeof(og_entry); }
OG_API uint32_t og_sizeof_meter(void) { return (uint32_t)sizeof(og_meter); }

/* Run n frames (concatenated in blob, lengths in lens) through the pipeline `rounds` times with
 * no Python in between (bench/bench_softswitch.py's "C loop" figure); returns the frames output. */
OG_API uint64_t og_dp_bench(og_dp *dp, uint32_t port, const uint8_t *blob, const uint32_t *lens,
                            uint32_t n, uint32_t rounds) {
    uint64_t out = 0;
    uint32_t out_port = 0;
    int fresh;
    for (uint32_t r = 0; r < rounds; r++) {
        const uint8_t *p = blob;
        for (uint32_t i = 0; i < n; i++) {
            if (og_dp_run(dp, port, p, lens[i], dp->obuf_py, &out_port, &fresh) >= 0) out++;
            p += lens[i];
        }
    }
    return out;
}

/* One table entry in one call (the mirror's fast path), from a blob of 64-bit words:
 *   action, ndata, data[ndata], meter_packets (-1: no meter), last_hit, packets, bytes,
 *   priority, nkeys, bits[nkeys], mask[nkeys], lo[nkeys], hi[nkeys]
 * Returns the entry, added to table `ti`, or NULL (allocation failure). */
static const uint64_t *og_blob_keys(const uint64_t *w, uint64_t *prio, uint32_t *nkeys) {
    uint64_t ndata = w[1];
    const uint64_t *p = w + 2 + ndata + 4;
    *prio = p[0];
    *nkeys = (uint32_t)p[1];
    return p + 2;
}

/* Under the lock for the table change only (see the note above og_dp_run: a Python holder could
 * wait for the GIL, long enough on a loaded machine to overflow the receive rings). The entry is
 * built before the lock is taken, with its
 * members (`members`: nmembers rows of `stride` words, action id then data; NULL for a direct
 * entry). */
OG_API og_entry *og_entry_insert(og_dp *dp, uint32_t ti, const void *blob, uint32_t nmembers,
                                 uint32_t stride, const uint64_t *members, uint32_t is_group) {
    const uint64_t *w = blob; /* Python bytes objects are 8-byte aligned */
    uint64_t ndata = w[1];
    int64_t meter_packets = (int64_t)w[2 + ndata];
    og_entry *e = og_entry_new((uint32_t)ndata, (int32_t)meter_packets);
    if (!e) return NULL;
    uint64_t *copy; /* an indirect table's entry has its members before any packet can see it */
    if (og_members_copy(nmembers, stride, members, &copy)) {
        og_entry_free(e);
        return NULL;
    }
    og_entry_put_members(e, copy, nmembers, stride, is_group);
    e->action = (int32_t)(int64_t)w[0];
    memcpy(e->data, w + 2, ndata * sizeof(uint64_t));
    e->last_hit = (int64_t)w[3 + ndata];
    e->packets = w[4 + ndata];
    e->bytes = w[5 + ndata];
    uint64_t prio;
    uint32_t n;
    const uint64_t *k = og_blob_keys(w, &prio, &n);
    int rc = -1;
    if (ti < OG_NTABLES) {
        pthread_mutex_lock(&dp->lock);
        rc = og_table_add(dp->t[ti], e, k, k + n, k + 2 * n, k + 3 * n, (int64_t)prio);
        pthread_mutex_unlock(&dp->lock);
    }
    if (rc != 0) {
        og_entry_free(e);
        return NULL;
    }
    return e;
}

/* Take an entry made by og_entry_insert out of its table (same blob), under the lock, and free
 * it. */
OG_API int og_entry_remove(og_dp *dp, uint32_t ti, og_entry *e, const void *blob) {
    uint64_t prio;
    uint32_t n;
    const uint64_t *k = og_blob_keys(blob, &prio, &n);
    int rc = -1;
    if (ti < OG_NTABLES) {
        pthread_mutex_lock(&dp->lock);
        rc = og_table_remove(dp->t[ti], e, k, k + n, k + 2 * n, k + 3 * n, (int64_t)prio);
        pthread_mutex_unlock(&dp->lock);
    }
    og_entry_free(e);
    return rc;
}
