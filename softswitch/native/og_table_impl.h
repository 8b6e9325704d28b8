/* The internals of the table index that og_table.c (groups, buckets, lookups) and
 * og_table_index.c (a bucket's interval index, the table's tuple-pruning index) share: the
 * layout of tables, groups, buckets and entries, and small helpers. Not an API: og_table.h is. */
#ifndef OG_TABLE_IMPL_H
#define OG_TABLE_IMPL_H

#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1 /* posix_memalign and madvise under -std=c99 */
#endif
#include "og_table.h"

#include <stdlib.h>
#include <string.h>

/* exported even when the object is built with -fvisibility=hidden (Python calls these) */
#if defined(__GNUC__)
#define OG_TABLE_API __attribute__((visibility("default")))
#define OG_TABLE_LIKELY(x) __builtin_expect(!!(x), 1)
#define OG_TABLE_PREFETCH(p) __builtin_prefetch(p)
#else
#define OG_TABLE_API
#define OG_TABLE_LIKELY(x) (x)
#define OG_TABLE_PREFETCH(p) ((void)(p))
#endif

#define OG_MAX_FIELDS 16
#define OG_IV_MIN 9        /* buckets with at least this many entries get an interval index */
#define OG_GROUP_CAP0 8    /* slots of a new group */
#define OG_PRUNE_GROUPS 8  /* tuple pruning with this many groups or more */
#define OG_PRUNE_MAX 512   /* candidate groups a pruned lookup collects (more: every group) */
#define OG_FILTER_LOG2 3   /* a group's filter has 2^OG_FILTER_LOG2 bits per slot of its hash table */
#define OG_HUGE (2u << 20) /* a huge page: slot tables this large or larger are aligned to it */

/* An entry, in a bucket: E_WORDS + 2 * nranges words. */
enum { E_VALUE = 0, E_PRIO = 1, E_SEQ = 2, E_WORDS = 3 }; /* then lo, hi per range field */

/* A slot of a group's hash table: S_WORDS + nk words; S_BUCKET 0 marks a free slot. */
enum { S_BUCKET = 0, S_VALUE = 1, S_WORDS = 2 }; /* then the masked key */

typedef struct og_win { /* the winner of an elementary interval (value NULL: none) */
    void *value;
    int64_t prio;
    uint64_t seq;
} og_win;

typedef struct og_iv { /* elementary intervals: [starts[i], starts[i + 1]) is won by win[i] */
    uint32_t n, cap;
    uint64_t *starts;
    og_win *win;
} og_iv;

typedef struct og_bucket {
    uint32_t n, cap; /* entries */
    uint32_t heap_at; /* position in its group's heap */
    uint32_t pad_;
    og_iv *iv;      /* interval index, or NULL */
    uint64_t e[];   /* cap entries of t->estride words, by decreasing rank */
} og_bucket;

typedef struct og_group {
    int64_t best_prio; /* the rank of heap[0]'s first entry */
    uint64_t best_seq;
    uint64_t *slots;    /* capmask + 1 slots of t->sstride words */
    uint64_t capmask;
    uint64_t used;      /* buckets, which is also the heap's size */
    uint64_t *filter;   /* pruning field's filter, sized for capmask + 1 slots (NULL: none) */
    uint64_t fstale;    /* buckets removed since the filter was last built */
    og_bucket **heap;   /* max-heap of buckets by the rank of their first entry */
    uint64_t heapcap;
    uint32_t at;        /* position in t->order */
    uint32_t pad_;
    uint64_t mask[];    /* nk words */
} og_group;

/* The pruning index: (mask, masked value) of the pruning field -> groups with such a bucket. */
typedef struct og_pgroup {
    og_group *g;
    uint64_t buckets; /* of g, with this masked value */
} og_pgroup;

typedef struct og_pent { /* a slot of the pruning index; n == 0: free */
    uint64_t mask, value;
    uint32_t n, cap;
    og_pgroup *gs;
} og_pent;

typedef struct og_pmask { /* a distinct mask of the pruning field, in how many slots */
    uint64_t mask;
    uint64_t refs;
} og_pmask;

struct og_table {
    uint32_t nfields;
    uint32_t nk;       /* non-range fields: the hashed part of the key */
    uint32_t nranges;  /* range fields: checked per entry */
    uint32_t estride;  /* words per entry */
    uint32_t sstride;  /* words per slot */
    uint32_t ngroups, groupcap;
    uint32_t pad_;
    uint32_t kpos[OG_MAX_FIELDS]; /* field index of each hashed word */
    uint32_t rpos[OG_MAX_FIELDS]; /* field index of each range */
    og_group **order;  /* groups by decreasing best rank */
    uint64_t size;
    uint64_t seq;      /* sequence number of the next add */
    int32_t pk;        /* the hashed word that prunes (first ternary or lpm field), -1: none */
    int32_t pbroken;   /* an allocation failed: pruning is off */
    og_pent *pidx;     /* pcap slots, linear probing, at most half full */
    uint64_t pcap, pused;
    og_pmask *pmasks;  /* distinct masks of the pruning field */
    uint32_t npmasks, pmaskcap;
};

/* ------------------------------------------------------------------ small helpers */
static inline uint64_t ptr_word(const void *p) { return (uint64_t)(uintptr_t)p; }
static inline void *word_ptr(uint64_t w) { return (void *)(uintptr_t)w; }

/* Does rank (p1, s1) beat rank (p2, s2): a larger priority, or the same and added earlier. */
static inline int beats(int64_t p1, uint64_t s1, int64_t p2, uint64_t s2) {
    return p1 > p2 || (p1 == p2 && s1 < s2);
}

static inline int words_eq(const uint64_t *a, const uint64_t *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* A hash of n words: a multiply-xorshift step per word (a bijection of the word for a given
 * state) and murmur3's 64-bit finaliser, whose low bits index the slots. */
static inline uint64_t hash_words(const uint64_t *w, uint32_t n) {
    uint64_t h = 0x243f6a8885a308d3ULL;
    for (uint32_t i = 0; i < n; i++) {
        h = (h ^ w[i]) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 32;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

#define ENTRY(t, b, i) ((b)->e + (size_t)(i) * (t)->estride)
#define SLOT(t, g, i) ((g)->slots + (size_t)(i) * (t)->sstride)

static inline int64_t e_prio(const uint64_t *e) { return (int64_t)e[E_PRIO]; }

/* Shared between the two files, not exported from the shared object. */
#if defined(__GNUC__)
#define OG_TABLE_INTERNAL __attribute__((visibility("hidden")))
#else
#define OG_TABLE_INTERNAL
#endif

/* og_table_index.c: a bucket's interval index (one range field) */
OG_TABLE_INTERNAL void iv_free(og_iv *iv);
OG_TABLE_INTERNAL void iv_build(const og_table *t, og_bucket *b);
OG_TABLE_INTERNAL int iv_insert(og_iv *iv, const uint64_t *e);
OG_TABLE_INTERNAL int iv_unpaint(const og_table *t, og_bucket *b, const uint64_t *gone);

/* og_table_index.c: the table's tuple-pruning index (its first ternary or LPM field) */
OG_TABLE_INTERNAL void prune_inc(og_table *t, og_group *g, uint64_t value);
OG_TABLE_INTERNAL void prune_dec(og_table *t, const og_group *g, uint64_t value);
OG_TABLE_INTERNAL void prune_reset(og_table *t);
OG_TABLE_INTERNAL int prune_candidates(const og_table *t, const uint64_t *kv, og_group **cand);

#endif
