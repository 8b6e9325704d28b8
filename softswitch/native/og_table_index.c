/* The secondary indexes of the table index (og_table.c): a bucket's elementary-interval index
 * and the table's tuple-pruning index, as og_table.c's opening comment describes them. */
#include "og_table_impl.h"

/* ------------------------------------------------------------------ interval index */
void iv_free(og_iv *iv) {
    if (!iv) return;
    free(iv->starts);
    free(iv->win);
    free(iv);
}

/* The first index in starts[0..n) whose start is >= x. */
static inline uint32_t lower_bound(const uint64_t *starts, uint32_t n, uint64_t x) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (starts[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint32_t uf_find(uint32_t *next, uint32_t i) {
    while (next[i] != i) {
        next[i] = next[next[i]];
        i = next[i];
    }
    return i;
}

static inline og_win win_of(const uint64_t *e) {
    og_win w = {word_ptr(e[E_VALUE]), e_prio(e), e[E_SEQ]};
    return w;
}

/* Build b's interval index from scratch (the only range field's bounds are e[3], e[4]). On an
 * allocation failure the bucket is left without one. */
void iv_build(const og_table *t, og_bucket *b) {
    iv_free(b->iv);
    b->iv = NULL;
    uint32_t m = b->n, np = 0;
    og_iv *iv = calloc(1, sizeof *iv);
    uint32_t *next = NULL;
    if (!iv) return;
    iv->cap = 2 * m + 2;
    iv->starts = malloc(iv->cap * sizeof(uint64_t));
    iv->win = calloc(iv->cap, sizeof(og_win));
    next = malloc((2 * (size_t)m + 1) * sizeof(uint32_t));
    if (!iv->starts || !iv->win || !next) goto fail;
    for (uint32_t k = 0; k < m; k++) {
        const uint64_t *e = ENTRY(t, b, k);
        uint64_t lo = e[E_WORDS], hi = e[E_WORDS + 1];
        if (lo > hi) continue;
        iv->starts[np++] = lo;
        if (hi != UINT64_MAX) iv->starts[np++] = hi + 1;
    }
    qsort(iv->starts, np, sizeof(uint64_t), cmp_u64);
    uint32_t u = 0;
    for (uint32_t i = 0; i < np; i++)
        if (u == 0 || iv->starts[i] != iv->starts[u - 1]) iv->starts[u++] = iv->starts[i];
    np = iv->n = u;
    for (uint32_t i = 0; i <= np; i++) next[i] = i;
    /* paint by decreasing rank: the first entry to cover an interval wins it */
    for (uint32_t k = 0; k < m; k++) {
        const uint64_t *e = ENTRY(t, b, k);
        uint64_t lo = e[E_WORDS], hi = e[E_WORDS + 1];
        if (lo > hi) continue;
        uint32_t end = hi == UINT64_MAX ? np : lower_bound(iv->starts, np, hi + 1);
        for (uint32_t i = uf_find(next, lower_bound(iv->starts, np, lo)); i < end;
             i = uf_find(next, i + 1)) {
            iv->win[i] = win_of(e);
            next[i] = i + 1;
        }
    }
    free(next);
    b->iv = iv;
    return;
fail:
    free(next);
    iv_free(iv);
}

/* The index of the interval starting at x, splitting the interval that holds x if need be. */
static uint32_t iv_split(og_iv *iv, uint64_t x) {
    uint32_t p = lower_bound(iv->starts, iv->n, x);
    if (p < iv->n && iv->starts[p] == x) return p;
    memmove(iv->starts + p + 1, iv->starts + p, (iv->n - p) * sizeof(uint64_t));
    memmove(iv->win + p + 1, iv->win + p, (iv->n - p) * sizeof(og_win));
    iv->starts[p] = x;
    if (p > 0)
        iv->win[p] = iv->win[p - 1];
    else
        memset(&iv->win[p], 0, sizeof(og_win));
    iv->n++;
    return p;
}

/* Paint the new entry e into the index; -1 on an allocation failure (the index is then stale). */
int iv_insert(og_iv *iv, const uint64_t *e) {
    uint64_t lo = e[E_WORDS], hi = e[E_WORDS + 1];
    if (lo > hi) return 0;
    if (iv->n + 2 > iv->cap) {
        uint32_t cap = 2 * iv->cap + 2;
        uint64_t *starts = realloc(iv->starts, cap * sizeof(uint64_t));
        if (!starts) return -1;
        iv->starts = starts;
        og_win *win = realloc(iv->win, cap * sizeof(og_win));
        if (!win) return -1;
        iv->win = win;
        iv->cap = cap;
    }
    uint32_t a = iv_split(iv, lo);
    uint32_t end = hi == UINT64_MAX ? iv->n : iv_split(iv, hi + 1);
    og_win w = win_of(e);
    for (uint32_t i = a; i < end; i++)
        if (!iv->win[i].value || beats(w.prio, w.seq, iv->win[i].prio, iv->win[i].seq))
            iv->win[i] = w;
    return 0;
}

/* Take the removed entry `gone` out of b's index: the intervals it won go to the best of the
 * remaining entries that cover them (painted by decreasing rank, as in iv_build, over the removed
 * entry's span only). Its bounds stay as interval starts. -1 on an allocation failure. */
int iv_unpaint(const og_table *t, og_bucket *b, const uint64_t *gone) {
    og_iv *iv = b->iv;
    uint64_t lo = gone[E_WORDS], hi = gone[E_WORDS + 1];
    if (lo > hi) return 0;
    uint32_t a = lower_bound(iv->starts, iv->n, lo);
    uint32_t end = hi == UINT64_MAX ? iv->n : lower_bound(iv->starts, iv->n, hi + 1);
    uint32_t span = end - a, cleared = 0;
    uint32_t *next = malloc(((size_t)span + 1) * sizeof(uint32_t)); /* relative to a */
    if (!next) return -1;
    for (uint32_t i = 0; i < span; i++) {
        og_win *w = &iv->win[a + i];
        next[i] = i + 1;
        if (w->value && w->seq == gone[E_SEQ]) {
            memset(w, 0, sizeof *w);
            next[i] = i;
            cleared++;
        }
    }
    next[span] = span;
    for (uint32_t k = 0; k < b->n && cleared; k++) {
        const uint64_t *e = ENTRY(t, b, k);
        uint64_t elo = e[E_WORDS], ehi = e[E_WORDS + 1];
        if (elo > ehi || ehi < lo || elo > hi) continue;
        uint32_t from = elo <= lo ? 0 : lower_bound(iv->starts, iv->n, elo) - a;
        uint32_t to = ehi >= hi ? span : lower_bound(iv->starts, iv->n, ehi + 1) - a;
        for (uint32_t i = uf_find(next, from); i < to; i = uf_find(next, i + 1)) {
            iv->win[a + i] = win_of(e);
            next[i] = i + 1;
            cleared--;
        }
    }
    free(next);
    return 0;
}

/* ------------------------------------------------------------------ tuple pruning */
static inline uint64_t phash(uint64_t mask, uint64_t value) {
    uint64_t w[2] = {mask, value};
    return hash_words(w, 2);
}

static og_pent *pent_find(const og_table *t, uint64_t mask, uint64_t value) {
    if (!t->pcap) return NULL;
    uint64_t m = t->pcap - 1;
    for (uint64_t i = phash(mask, value) & m;; i = (i + 1) & m) {
        og_pent *p = &t->pidx[i];
        if (!p->n) return NULL;
        if (p->mask == mask && p->value == value) return p;
    }
}

static og_pent *pent_free_at(og_table *t, uint64_t mask, uint64_t value) {
    uint64_t m = t->pcap - 1;
    uint64_t i = phash(mask, value) & m;
    while (t->pidx[i].n) i = (i + 1) & m;
    return &t->pidx[i];
}

static int pidx_resize(og_table *t, uint64_t cap) {
    og_pent *old = t->pidx;
    uint64_t oldcap = t->pcap;
    og_pent *fresh = calloc(cap, sizeof(og_pent));
    if (!fresh) return -1;
    t->pidx = fresh;
    t->pcap = cap;
    for (uint64_t i = 0; i < oldcap; i++)
        if (old[i].n) *pent_free_at(t, old[i].mask, old[i].value) = old[i];
    free(old);
    return 0;
}

static void pent_delete(og_table *t, og_pent *p) { /* backward-shift deletion */
    uint64_t m = t->pcap - 1;
    uint64_t i = (uint64_t)(p - t->pidx);
    free(p->gs);
    for (uint64_t j = (i + 1) & m;; j = (j + 1) & m) {
        og_pent *q = &t->pidx[j];
        if (!q->n) break;
        uint64_t home = phash(q->mask, q->value) & m;
        /* q may move to i if its home is not in (i, j] cyclically */
        if (((j - home) & m) >= ((j - i) & m)) {
            t->pidx[i] = *q;
            i = j;
        }
    }
    memset(&t->pidx[i], 0, sizeof(og_pent));
    t->pused--;
}

static int pmask_ref(og_table *t, uint64_t mask, int delta) {
    for (uint32_t i = 0; i < t->npmasks; i++) {
        if (t->pmasks[i].mask != mask) continue;
        t->pmasks[i].refs += (uint64_t)(int64_t)delta;
        if (!t->pmasks[i].refs) t->pmasks[i] = t->pmasks[--t->npmasks];
        return 0;
    }
    if (delta < 0) return -1;
    if (t->npmasks == t->pmaskcap) {
        uint32_t cap = t->pmaskcap ? 2 * t->pmaskcap : 8;
        og_pmask *pm = realloc(t->pmasks, cap * sizeof(og_pmask));
        if (!pm) return -1;
        t->pmasks = pm;
        t->pmaskcap = cap;
    }
    t->pmasks[t->npmasks].mask = mask;
    t->pmasks[t->npmasks++].refs = 1;
    return 0;
}

/* A bucket with masked value `value` in the pruning field was made in g. */
void prune_inc(og_table *t, og_group *g, uint64_t value) {
    if (t->pk < 0 || t->pbroken) return;
    uint64_t mask = g->mask[t->pk];
    og_pent *p = pent_find(t, mask, value);
    if (!p) {
        if ((t->pused + 1) * 2 > t->pcap && pidx_resize(t, t->pcap ? 2 * t->pcap : 64)) goto broken;
        if (pmask_ref(t, mask, 1)) goto broken;
        p = pent_free_at(t, mask, value);
        p->gs = malloc(4 * sizeof(og_pgroup));
        if (!p->gs) goto broken;
        p->mask = mask;
        p->value = value;
        p->cap = 4;
        p->gs[0].g = g;
        p->gs[0].buckets = 1;
        p->n = 1;
        t->pused++;
        return;
    }
    for (uint32_t i = 0; i < p->n; i++)
        if (p->gs[i].g == g) {
            p->gs[i].buckets++;
            return;
        }
    if (p->n == p->cap) {
        og_pgroup *gs = realloc(p->gs, 2 * p->cap * sizeof(og_pgroup));
        if (!gs) goto broken;
        p->gs = gs;
        p->cap *= 2;
    }
    p->gs[p->n].g = g;
    p->gs[p->n++].buckets = 1;
    return;
broken:
    t->pbroken = 1;
}

/* A bucket with masked value `value` in the pruning field left g. */
void prune_dec(og_table *t, const og_group *g, uint64_t value) {
    if (t->pk < 0 || t->pbroken) return;
    uint64_t mask = g->mask[t->pk];
    og_pent *p = pent_find(t, mask, value);
    if (!p) {
        t->pbroken = 1; /* cannot happen; never prune on an index that is not exact */
        return;
    }
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->gs[i].g != g) continue;
        if (--p->gs[i].buckets == 0) {
            p->gs[i] = p->gs[--p->n];
            if (p->n == 0) {
                pent_delete(t, p);
                (void)pmask_ref(t, mask, -1);
            }
        }
        return;
    }
    t->pbroken = 1;
}

void prune_reset(og_table *t) {
    for (uint64_t i = 0; i < t->pcap; i++) free(t->pidx[i].gs);
    free(t->pidx);
    free(t->pmasks);
    t->pidx = NULL;
    t->pmasks = NULL;
    t->pcap = t->pused = 0;
    t->npmasks = t->pmaskcap = 0;
    t->pbroken = 0;
}


static int by_rank(const void *a, const void *b) {
    uint32_t x = (*(og_group *const *)a)->at, y = (*(og_group *const *)b)->at;
    return (x > y) - (x < y);
}

/* Tuple pruning: the groups that hold the key's value in the pruning field, in rank order, into
 * cand; their number, or -1 when pruning does not apply (then every group is probed). */
int prune_candidates(const og_table *t, const uint64_t *kv, og_group **cand) {
    if (t->pk < 0 || t->pbroken || t->ngroups < OG_PRUNE_GROUPS ||
        2 * t->npmasks > t->ngroups)
        return -1;
    uint64_t k = kv[t->pk];
    int n = 0;
    for (uint32_t i = 0; i < t->npmasks; i++) {
        uint64_t mask = t->pmasks[i].mask;
        const og_pent *p = pent_find(t, mask, k & mask);
        if (!p) continue;
        if (n + (int)p->n > OG_PRUNE_MAX) return -1;
        for (uint32_t j = 0; j < p->n; j++) cand[n++] = p->gs[j].g;
    }
    if (n > 1) {
        if (n <= 16) { /* insertion sort: usually a handful */
            for (int i = 1; i < n; i++) {
                og_group *g = cand[i];
                int j = i - 1;
                while (j >= 0 && cand[j]->at > g->at) {
                    cand[j + 1] = cand[j];
                    j--;
                }
                cand[j + 1] = g;
            }
        } else {
            qsort(cand, (size_t)n, sizeof(og_group *), by_rank);
        }
    }
    return n;
}
