/* The lookup index of a match-action table: tuple-space search, as softswitch/tables.py's
 * TernaryIndex does it in Python, for every kind of key (exact, lpm, ternary, range, optional).
 *
 * What it is.
 *   Entries are grouped by their mask vector: one mask word per non-range field (exact: all ones,
 *   lpm: the prefix mask, ternary: its mask, optional: all ones or 0). Range fields take no part
 *   in the grouping (their mask is 0); each entry keeps its [lo, hi] per range field and the
 *   bucket checks them.
 *   - A group is an open-addressing hash table (linear probing, power-of-two capacity, at most half
 *     full, backward-shift deletion so there are no tombstones) from the masked key to a bucket.
 *     A slot holds the bucket pointer, the masked key itself and, in a table without range fields,
 *     the bucket's winning value: an exact lookup is one hash and one slot read.
 *   - A bucket holds the entries of one masked key, sorted by decreasing rank. The rank of an entry
 *     is (priority, then earlier-added first): each entry carries the sequence number of its add.
 *   - Each group keeps its buckets in a binary max-heap by the rank of their first entry, so the
 *     group's best rank (heap[0]) stays exact through removes at O(log n).
 *   - The table keeps its groups sorted by best rank. A lookup probes the groups in that order and
 *     stops at the first group whose best rank cannot beat the match found so far. An exact table
 *     is one group and one probe; an LPM table (priority = prefix length) is one group per prefix
 *     length, probed longest first, stopping at the first hit.
 *   - A bucket of OG_IV_MIN (9) entries or more in a table with exactly one range field (HSM's
 *     port segment tables: thousands of disjoint port ranges under one exact version) gets an
 *     elementary-interval index: the sorted starts of the intervals that the entries' bounds cut
 *     the field into, each with its winning entry, found by binary search. It is built by painting
 *     the entries in decreasing rank (a union-find skips painted intervals, as tables.py's
 *     paint_intervals). An add splits at most two intervals and paints the new entry over those of
 *     its span that it beats; a remove repaints the intervals the removed entry won with the best
 *     of the others. Bounds of removed entries stay as interval starts until there are more than
 *     four starts per entry; the index is then built again. Other buckets are scanned in rank
 *     order, stopping at the first entry whose ranges hold.
 *   - A lookup works out the next group's masked key and hash one group ahead and prefetches its
 *     slot, so that the probes of a miss across many groups overlap.
 *   - Where there is a pruning field (below), each group has a filter: a bitmap of
 *     2^OG_FILTER_LOG2 bits per slot, with a bit set for each of its buckets' masked values of
 *     that field (a multiplicative hash). A lookup skips a group whose bit for the key is clear without
 *     probing its hash table: an LPM table of many prefix lengths costs one bit test (a few
 *     cached bitmaps) per length that cannot match, not one probe of a large hash table. Bits
 *     of removed buckets stay set (a lookup then probes for nothing) until they are more than
 *     half the buckets; the filter is then built again, as it is when the hash table resizes.
 *
 * Why.
 *   Lookups and changes never overlap: og_dp.c takes the data plane's lock for each frame and
 *   for each add, remove or clear (so freeing a resized hash table or a rebuilt filter is safe).
 *   Everything a lookup reads (group order, best ranks, cached winners, interval indexes,
 *   filters) is brought up to date eagerly by add and remove, so that lookup writes nothing and
 *   stays short. Adds and removes cost O(log n) amortised (bucket insertion, heap sift, hash growth)
 *   plus O(groups) to find the group and re-sort the group list, plus, in a bucket with an interval
 *   index, O(m) for its m entries (O(m log m) when the index is built again). An allocation
 *   failure while keeping an interval index drops the index (the bucket is then scanned, which is
 *   correct) and the next change of that bucket tries again.
 *
 *   - Tuple pruning (Srinivasan et al., as tables.py's TernaryIndex): the first ternary or LPM
 *     field prunes. An index maps (the group's mask of that field, a bucket's masked value of it)
 *     to the groups holding such a bucket, with a count of those buckets per group. With
 *     OG_PRUNE_GROUPS (8) groups or more, and at most half as many distinct masks of the field as
 *     groups, a lookup first asks the index, one probe per distinct mask, which groups can match
 *     the key's value in that field, and probes only those, in rank order. A miss then costs one
 *     probe per distinct mask of that field and per group that holds the value, not one per group.
 *     An allocation failure while keeping the index turns pruning off for the table (every group
 *     is probed, which is correct).
 */
#include "og_table_impl.h"

#include <sys/mman.h>

/* ------------------------------------------------------------------ a group's filter */
/* The bit of a masked value of the pruning field (the product's high bits: a prefix's masked
 * value has its low bits 0). */
static inline uint64_t filter_bit(const og_group *g, uint64_t masked) {
    /* the filter has 2^(log2(capmask + 1) + OG_FILTER_LOG2) bits */
    return (masked * 0x9e3779b97f4a7c15ULL) >> (__builtin_clzll(g->capmask) - OG_FILTER_LOG2);
}

static inline void filter_set(og_group *g, uint64_t masked) {
    uint64_t i = filter_bit(g, masked);
    g->filter[i >> 6] |= 1ULL << (i & 63);
}

/* Can group g hold a bucket for the key's pruning field (key words kv)? No when its bit is clear. */
static inline int filter_may(const og_table *t, const og_group *g, const uint64_t *kv) {
    if (!g->filter) return 1;
    uint64_t i = filter_bit(g, kv[t->pk] & g->mask[t->pk]);
    return (int)((g->filter[i >> 6] >> (i & 63)) & 1);
}

/* In place of g's filter (freed), one sized for g's hash table as it is to be (capmask set: a
 * resize sets it first), with the bits of the buckets in `slots` (n slots); -1 when out of memory
 * (g's is left as it was). No filter where there is no pruning field. */
static int filter_build(const og_table *t, og_group *g, const uint64_t *slots, uint64_t n) {
    if (t->pk < 0) return 0;
    uint64_t words = ((g->capmask + 1) << OG_FILTER_LOG2) / 64; /* capmask + 1 >= 8 slots */
    uint64_t *filter = calloc((size_t)words, sizeof(uint64_t));
    if (!filter) return -1;
    uint64_t *old = g->filter;
    g->filter = filter;
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t *s = slots + i * t->sstride;
        if (s[S_BUCKET]) filter_set(g, s[S_WORDS + t->pk]);
    }
    free(old);
    g->fstale = 0;
    return 0;
}


static inline int bucket_beats(const og_bucket *a, const og_bucket *b) {
    return beats(e_prio(a->e), a->e[E_SEQ], e_prio(b->e), b->e[E_SEQ]);
}

static inline int group_beats(const og_group *a, const og_group *b) {
    return beats(a->best_prio, a->best_seq, b->best_prio, b->best_seq);
}

/* ------------------------------------------------------------------ hash table of a group */
static inline uint64_t *slot_find(const og_table *t, const og_group *g, const uint64_t *mk,
                                  uint64_t h) {
    for (uint64_t i = h & g->capmask;; i = (i + 1) & g->capmask) {
        uint64_t *s = SLOT(t, g, i);
        if (!s[S_BUCKET]) return NULL;
        if (words_eq(s + S_WORDS, mk, t->nk)) return s;
    }
}

static inline uint64_t *slot_free_at(const og_table *t, const og_group *g, uint64_t h) {
    for (uint64_t i = h & g->capmask;; i = (i + 1) & g->capmask) {
        uint64_t *s = SLOT(t, g, i);
        if (!s[S_BUCKET]) return s;
    }
}

/* Zeroed memory for a hash table's slots; a large one in huge pages where the kernel has them
 * (a lookup of a table of millions of slots then misses the TLB far less often). */
static uint64_t *slots_alloc(size_t bytes) {
    if (bytes < OG_HUGE) return calloc(1, bytes);
    size_t whole = (bytes + OG_HUGE - 1) / OG_HUGE * OG_HUGE;
    void *p = NULL;
    if (posix_memalign(&p, OG_HUGE, whole)) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, whole, MADV_HUGEPAGE);
#endif
    memset(p, 0, whole);
    return p;
}

static int slots_resize(const og_table *t, og_group *g, uint64_t cap) {
    size_t ss = t->sstride;
    uint64_t *slots = slots_alloc((size_t)cap * ss * sizeof(uint64_t));
    if (!slots) return -1;
    uint64_t *old = g->slots, oldcap = g->capmask + 1;
    /* the filter first: sized for the new capacity, with the bits of the buckets there are */
    g->capmask = cap - 1;
    if (filter_build(t, g, old, oldcap)) {
        g->capmask = oldcap - 1;
        free(slots);
        return -1;
    }
    g->slots = slots;
    for (uint64_t i = 0; i < oldcap; i++) {
        const uint64_t *s = old + i * ss;
        if (s[S_BUCKET])
            memcpy(slot_free_at(t, g, hash_words(s + S_WORDS, t->nk)), s, ss * sizeof(uint64_t));
    }
    free(old);
    return 0;
}

/* Free slot s, shifting back the slots after it that probing would no longer reach. */
static void slot_delete(const og_table *t, og_group *g, uint64_t *s) {
    size_t ss = t->sstride;
    uint64_t m = g->capmask, i = (uint64_t)(s - g->slots) / ss, j = i;
    for (;;) {
        j = (j + 1) & m;
        uint64_t *sj = SLOT(t, g, j);
        if (!sj[S_BUCKET]) break;
        uint64_t home = hash_words(sj + S_WORDS, t->nk) & m;
        /* sj stays if its home lies cyclically in (i, j]: probing from there never passes i */
        if (i <= j ? (home > i && home <= j) : (home > i || home <= j)) continue;
        memcpy(SLOT(t, g, i), sj, ss * sizeof(uint64_t));
        i = j;
    }
    memset(SLOT(t, g, i), 0, ss * sizeof(uint64_t));
}

/* ------------------------------------------------------------------ heap of a group's buckets */
static void heap_set(og_group *g, uint64_t i, og_bucket *b) {
    g->heap[i] = b;
    b->heap_at = (uint32_t)i;
}

static void heap_up(og_group *g, uint64_t i) {
    og_bucket *b = g->heap[i];
    while (i > 0) {
        uint64_t p = (i - 1) / 2;
        if (!bucket_beats(b, g->heap[p])) break;
        heap_set(g, i, g->heap[p]);
        i = p;
    }
    heap_set(g, i, b);
}

static void heap_down(og_group *g, uint64_t i) {
    og_bucket *b = g->heap[i];
    uint64_t n = g->used;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bucket_beats(g->heap[c + 1], g->heap[c])) c++;
        if (!bucket_beats(g->heap[c], b)) break;
        heap_set(g, i, g->heap[c]);
        i = c;
    }
    heap_set(g, i, b);
}

/* Take heap[i] out; the group has one bucket fewer. */
static void heap_remove(og_group *g, uint64_t i) {
    uint64_t last = --g->used;
    if (i == last) return;
    og_bucket *moved = g->heap[last];
    heap_set(g, i, moved);
    heap_up(g, i);
    heap_down(g, moved->heap_at);
}

/* ------------------------------------------------------------------ group order */
static void order_fix(og_table *t, uint32_t i) {
    og_group **o = t->order, *g = o[i];
    while (i > 0 && group_beats(g, o[i - 1])) {
        o[i] = o[i - 1];
        o[i]->at = i;
        i--;
    }
    while (i + 1 < t->ngroups && group_beats(o[i + 1], g)) {
        o[i] = o[i + 1];
        o[i]->at = i;
        i++;
    }
    o[i] = g;
    g->at = i;
}

/* Take the group's best rank from its heap again and move it to its place in the order. */
static void group_refresh(og_table *t, og_group *g) {
    const og_bucket *b = g->heap[0];
    int64_t p = e_prio(b->e);
    uint64_t s = b->e[E_SEQ];
    if (p == g->best_prio && s == g->best_seq) return;
    g->best_prio = p;
    g->best_seq = s;
    order_fix(t, g->at);
}

static og_group *group_find(const og_table *t, const uint64_t *mv) {
    for (uint32_t i = 0; i < t->ngroups; i++)
        if (words_eq(t->order[i]->mask, mv, t->nk)) return t->order[i];
    return NULL;
}

static og_group *group_new(const og_table *t, const uint64_t *mv) {
    og_group *g = calloc(1, sizeof(og_group) + t->nk * sizeof(uint64_t));
    if (!g) return NULL;
    memcpy(g->mask, mv, t->nk * sizeof(uint64_t));
    g->slots = calloc(OG_GROUP_CAP0, t->sstride * sizeof(uint64_t));
    g->heap = malloc(OG_GROUP_CAP0 / 2 * sizeof(og_bucket *));
    if (!g->slots || !g->heap) {
        free(g->slots);
        free(g->heap);
        free(g);
        return NULL;
    }
    g->capmask = OG_GROUP_CAP0 - 1;
    g->heapcap = OG_GROUP_CAP0 / 2;
    if (filter_build(t, g, g->slots, 0)) {
        free(g->slots);
        free(g->heap);
        free(g);
        return NULL;
    }
    return g;
}

static void group_free(const og_table *t, og_group *g) {
    for (uint64_t i = 0; i <= g->capmask; i++) {
        og_bucket *b = word_ptr(SLOT(t, g, i)[S_BUCKET]);
        if (b) {
            iv_free(b->iv);
            free(b);
        }
    }
    free(g->slots);
    free(g->heap);
    free(g->filter);
    free(g);
}

static void order_remove(og_table *t, uint32_t i) {
    t->ngroups--;
    for (; i < t->ngroups; i++) {
        t->order[i] = t->order[i + 1];
        t->order[i]->at = i;
    }
}

/* ------------------------------------------------------------------ public API */
OG_TABLE_API og_table *og_table_new(uint32_t nfields, const uint8_t *kinds, const uint8_t *widths) {
    if (nfields > OG_MAX_FIELDS || (nfields && (!kinds || !widths))) return NULL;
    for (uint32_t i = 0; i < nfields; i++)
        if (kinds[i] > OG_MATCH_OPTIONAL || widths[i] < 1 || widths[i] > 64) return NULL;
    og_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->nfields = nfields;
    for (uint32_t i = 0; i < nfields; i++) {
        if (kinds[i] == OG_MATCH_RANGE)
            t->rpos[t->nranges++] = i;
        else
            t->kpos[t->nk++] = i;
    }
    t->estride = E_WORDS + 2 * t->nranges;
    t->sstride = S_WORDS + t->nk;
    t->pk = -1;
    for (uint32_t j = 0; j < t->nk; j++)
        if (kinds[t->kpos[j]] == OG_MATCH_TERNARY || kinds[t->kpos[j]] == OG_MATCH_LPM) {
            t->pk = (int32_t)j;
            break;
        }
    return t;
}

OG_TABLE_API void og_table_clear(og_table *t) {
    if (!t) return;
    for (uint32_t i = 0; i < t->ngroups; i++) group_free(t, t->order[i]);
    t->ngroups = 0;
    t->size = 0;
    t->seq = 0;
    prune_reset(t);
}

OG_TABLE_API void og_table_free(og_table *t) {
    if (!t) return;
    og_table_clear(t);
    free(t->order);
    free(t);
}

OG_TABLE_API uint64_t og_table_size(const og_table *t) { return t ? t->size : 0; }

/* The mask vector and masked key of an entry. */
static void entry_key(const og_table *t, const uint64_t *bits, const uint64_t *mask, uint64_t *mv,
                      uint64_t *mk) {
    for (uint32_t j = 0; j < t->nk; j++) {
        uint32_t f = t->kpos[j];
        mv[j] = mask[f];
        mk[j] = bits[f] & mask[f];
    }
}

OG_TABLE_API int og_table_add(og_table *t, void *value, const uint64_t *value_bits,
                              const uint64_t *mask, const uint64_t *lo, const uint64_t *hi,
                              int64_t priority) {
    if (!t || !value || !t->nfields || (t->nk && (!value_bits || !mask)) ||
        (t->nranges && (!lo || !hi)))
        return -1;
    uint64_t mv[OG_MAX_FIELDS] = {0}, mk[OG_MAX_FIELDS] = {0};
    entry_key(t, value_bits, mask, mv, mk);

    og_group *g = group_find(t, mv);
    int fresh = 0;
    if (!g) {
        if (t->ngroups == t->groupcap) {
            uint32_t cap = t->groupcap ? 2 * t->groupcap : 8;
            og_group **order = realloc(t->order, cap * sizeof(og_group *));
            if (!order) return -1;
            t->order = order;
            t->groupcap = cap;
        }
        if (!(g = group_new(t, mv))) return -1;
        fresh = 1;
    }

    uint64_t h = hash_words(mk, t->nk);
    uint64_t *s = slot_find(t, g, mk, h);
    og_bucket *b;
    uint32_t pos;
    if (!s) { /* a new bucket */
        if (g->used == g->heapcap) {
            og_bucket **heap = realloc(g->heap, 2 * g->heapcap * sizeof(og_bucket *));
            if (!heap) goto fail;
            g->heap = heap;
            g->heapcap *= 2;
        }
        if ((g->used + 1) * 2 > g->capmask + 1 && slots_resize(t, g, 2 * (g->capmask + 1)))
            goto fail;
        b = malloc(sizeof(og_bucket) + t->estride * sizeof(uint64_t));
        if (!b) goto fail;
        b->n = 0;
        b->cap = 1;
        b->pad_ = 0;
        b->iv = NULL;
        if (g->filter) filter_set(g, mk[t->pk]);
        s = slot_free_at(t, g, h);
        s[S_BUCKET] = ptr_word(b);
        memcpy(s + S_WORDS, mk, t->nk * sizeof(uint64_t));
        heap_set(g, g->used++, b);
        if (t->pk >= 0) prune_inc(t, g, mk[t->pk]);
        pos = 0;
    } else {
        b = word_ptr(s[S_BUCKET]);
        if (b->n == b->cap) {
            uint32_t cap = 2 * b->cap;
            size_t bytes = sizeof(og_bucket) + (size_t)cap * t->estride * sizeof(uint64_t);
            og_bucket *nb = realloc(b, bytes);
            if (!nb) return -1; /* the group existed: nothing to undo */
            b = nb;
            b->cap = cap;
            s[S_BUCKET] = ptr_word(b);
            g->heap[b->heap_at] = b;
        }
        /* after the entries of the same or larger priority: they were all added earlier */
        uint32_t l = 0, r = b->n;
        while (l < r) {
            uint32_t mid = l + (r - l) / 2;
            if (e_prio(ENTRY(t, b, mid)) >= priority)
                l = mid + 1;
            else
                r = mid;
        }
        pos = l;
        memmove(ENTRY(t, b, pos + 1), ENTRY(t, b, pos),
                (size_t)(b->n - pos) * t->estride * sizeof(uint64_t));
    }
    uint64_t *e = ENTRY(t, b, pos);
    e[E_VALUE] = ptr_word(value);
    e[E_PRIO] = (uint64_t)priority;
    e[E_SEQ] = t->seq++;
    for (uint32_t r = 0; r < t->nranges; r++) {
        e[E_WORDS + 2 * r] = lo[t->rpos[r]];
        e[E_WORDS + 2 * r + 1] = hi[t->rpos[r]];
    }
    b->n++;
    t->size++;
    if (pos == 0) heap_up(g, b->heap_at);
    if (t->nranges == 0) s[S_VALUE] = b->e[E_VALUE];
    if (t->nranges == 1 && b->n >= OG_IV_MIN) {
        if (!b->iv)
            iv_build(t, b);
        else if (iv_insert(b->iv, e)) {
            iv_free(b->iv);
            b->iv = NULL;
        }
    }
    if (fresh) {
        g->best_prio = e_prio(g->heap[0]->e);
        g->best_seq = g->heap[0]->e[E_SEQ];
        g->at = t->ngroups;
        t->order[t->ngroups++] = g;
        order_fix(t, g->at);
    } else {
        group_refresh(t, g);
    }
    return 0;
fail:
    if (fresh) group_free(t, g);
    return -1;
}

OG_TABLE_API int og_table_remove(og_table *t, void *value, const uint64_t *value_bits,
                                 const uint64_t *mask, const uint64_t *lo, const uint64_t *hi,
                                 int64_t priority) {
    if (!t || !t->ngroups || (t->nk && (!value_bits || !mask)) || (t->nranges && (!lo || !hi)))
        return -1;
    uint64_t mv[OG_MAX_FIELDS] = {0}, mk[OG_MAX_FIELDS] = {0};
    entry_key(t, value_bits, mask, mv, mk);
    og_group *g = group_find(t, mv);
    if (!g) return -1;
    uint64_t *s = slot_find(t, g, mk, hash_words(mk, t->nk));
    if (!s) return -1;
    og_bucket *b = word_ptr(s[S_BUCKET]);

    /* the first entry of this priority, then the one with this value and these ranges */
    uint32_t l = 0, r = b->n;
    while (l < r) {
        uint32_t mid = l + (r - l) / 2;
        if (e_prio(ENTRY(t, b, mid)) > priority)
            l = mid + 1;
        else
            r = mid;
    }
    uint32_t pos = l;
    for (; pos < b->n; pos++) {
        const uint64_t *e = ENTRY(t, b, pos);
        if (e_prio(e) != priority) return -1;
        if (e[E_VALUE] != ptr_word(value)) continue;
        uint32_t k = 0;
        while (k < t->nranges && e[E_WORDS + 2 * k] == lo[t->rpos[k]] &&
               e[E_WORDS + 2 * k + 1] == hi[t->rpos[k]])
            k++;
        if (k == t->nranges) break;
    }
    if (pos == b->n) return -1;

    uint64_t gone[E_WORDS + 2]; /* the entry's rank and, in a one-range table, its bounds */
    memcpy(gone, ENTRY(t, b, pos), (t->nranges == 1 ? E_WORDS + 2 : E_WORDS) * sizeof(uint64_t));
    b->n--;
    t->size--;
    memmove(ENTRY(t, b, pos), ENTRY(t, b, pos + 1),
            (size_t)(b->n - pos) * t->estride * sizeof(uint64_t));
    if (b->n == 0) {
        if (t->pk >= 0) prune_dec(t, g, s[S_WORDS + t->pk]);
        heap_remove(g, b->heap_at);
        slot_delete(t, g, s);
        iv_free(b->iv);
        free(b);
        if (g->used == 0) {
            order_remove(t, g->at);
            group_free(t, g);
            return 0;
        }
        uint64_t cap = g->capmask + 1;
        if (cap > OG_GROUP_CAP0 && g->used * 8 < cap) {
            (void)slots_resize(t, g, cap / 2);
        } else if (g->filter && ++g->fstale > g->used / 2 + 8) {
            /* the filter keeps the bits of removed buckets (a lookup then probes for nothing):
             * built again from what is left once they are many (out of memory: kept as is) */
            (void)filter_build(t, g, g->slots, cap);
        }
    } else {
        if (pos == 0) heap_down(g, b->heap_at);
        if (t->nranges == 0) s[S_VALUE] = b->e[E_VALUE];
        if (t->nranges == 1) {
            if (b->n < OG_IV_MIN) {
                iv_free(b->iv);
                b->iv = NULL;
            } else if (!b->iv || b->iv->n > 4 * b->n + 8 || iv_unpaint(t, b, gone)) {
                iv_build(t, b); /* none yet, or too many stale points, or out of memory */
            }
        }
    }
    group_refresh(t, g);
    return 0;
}

/* The best entry of the bucket in slot s that matches (its ranges hold) and beats the best so
 * far (*best, ranked *bp, *bs; *best NULL: none yet). */
static inline void consider(const og_table *t, const uint64_t *s, const uint64_t *key,
                            void **best, int64_t *bp, uint64_t *bs) {
    const og_bucket *b = word_ptr(s[S_BUCKET]);
    if (OG_TABLE_LIKELY(t->nranges == 0)) { /* the bucket's first entry wins it */
        if (!*best || beats(e_prio(b->e), b->e[E_SEQ], *bp, *bs)) {
            *best = word_ptr(s[S_VALUE]);
            *bp = e_prio(b->e);
            *bs = b->e[E_SEQ];
        }
        return;
    }
    const og_iv *iv = b->iv;
    if (iv) {
        uint64_t k = key[t->rpos[0]];
        uint32_t l = 0, r = iv->n; /* the last interval starting at or below k */
        while (l < r) {
            uint32_t mid = l + (r - l) / 2;
            if (iv->starts[mid] <= k)
                l = mid + 1;
            else
                r = mid;
        }
        if (l == 0) return;
        const og_win *w = &iv->win[l - 1];
        if (w->value && (!*best || beats(w->prio, w->seq, *bp, *bs))) {
            *best = w->value;
            *bp = w->prio;
            *bs = w->seq;
        }
        return;
    }
    for (uint32_t i = 0; i < b->n; i++) {
        const uint64_t *e = ENTRY(t, b, i);
        if (*best && !beats(e_prio(e), e[E_SEQ], *bp, *bs)) return;
        uint32_t k = 0;
        while (k < t->nranges) {
            uint64_t v = key[t->rpos[k]];
            if (v < e[E_WORDS + 2 * k] || v > e[E_WORDS + 2 * k + 1]) break;
            k++;
        }
        if (k == t->nranges) {
            *best = word_ptr(e[E_VALUE]);
            *bp = e_prio(e);
            *bs = e[E_SEQ];
            return;
        }
    }
}

/* The first group from `from` on (in rank order) whose filter lets the key through (key words
 * kv), or t->ngroups. */
static inline uint32_t next_group(const og_table *t, const uint64_t *kv, uint32_t from) {
    while (from < t->ngroups && !filter_may(t, t->order[from], kv)) from++;
    return from;
}

OG_TABLE_API void *og_table_lookup(const og_table *t, const uint64_t *key) {
    uint32_t ng = t->ngroups, nk = t->nk;
    if (!ng) return NULL;
    uint64_t kv[OG_MAX_FIELDS], mk[2][OG_MAX_FIELDS];
    for (uint32_t j = 0; j < nk; j++) kv[j] = key[t->kpos[j]];
    void *best = NULL;
    int64_t bp = 0;
    uint64_t bs = 0;
    og_group *cand[OG_PRUNE_MAX];
    int nc = prune_candidates(t, kv, cand);
    if (nc >= 0) {
        for (int ci = 0; ci < nc; ci++) {
            const og_group *g = cand[ci];
            if (best && !beats(g->best_prio, g->best_seq, bp, bs)) break;
            for (uint32_t j = 0; j < nk; j++) mk[0][j] = kv[j] & g->mask[j];
            const uint64_t *s = slot_find(t, g, mk[0], hash_words(mk[0], nk));
            if (s) consider(t, s, key, &best, &bp, &bs);
        }
        return best;
    }
    /* the masked key and hash of the next group whose filter lets the key through are worked
     * out one group ahead and its slot prefetched, so that the probes of a miss in many groups
     * overlap; a group whose filter says no is not probed */
    uint32_t gi = next_group(t, kv, 0);
    uint64_t h = 0;
    if (gi < ng) {
        for (uint32_t j = 0; j < nk; j++) mk[0][j] = kv[j] & t->order[gi]->mask[j];
        h = hash_words(mk[0], nk);
    }
    for (uint32_t cur = 0; gi < ng; cur ^= 1) {
        const og_group *g = t->order[gi];
        if (best && !beats(g->best_prio, g->best_seq, bp, bs)) break;
        uint32_t gn = next_group(t, kv, gi + 1);
        uint64_t hn = 0;
        if (gn < ng) {
            const og_group *next_g = t->order[gn];
            uint64_t *next = mk[cur ^ 1];
            for (uint32_t j = 0; j < nk; j++) next[j] = kv[j] & next_g->mask[j];
            hn = hash_words(next, nk);
            OG_TABLE_PREFETCH(SLOT(t, next_g, hn & next_g->capmask));
        }
        const uint64_t *s = slot_find(t, g, mk[cur], h);
        h = hn;
        gi = gn;
        if (!s) continue;
        if (OG_TABLE_LIKELY(t->nranges == 0) && !best && gn == ng) return word_ptr(s[S_VALUE]);
        consider(t, s, key, &best, &bp, &bs);
    }
    return best;
}
