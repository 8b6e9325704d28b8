/* The lookup index of one match-action table (softswitch/native/og_table.c).
 *
 * A key is an array of uint64_t, one word per key field (each field at most 64 bits wide). The
 * index maps a packet's key to the value pointer of the winning entry: of the entries that match,
 * the one with the largest priority, and among equal priorities the one added first.
 *
 * Thread safety: lookups only read, so any number of threads may look up at once as long as no
 * add, remove or clear runs at the same time (the caller holds the data plane's lock for those).
 */
#ifndef OG_TABLE_H
#define OG_TABLE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct og_table og_table;

/* Match kinds, as the `kinds` bytes of og_table_new give them. */
enum { OG_MATCH_EXACT = 0, OG_MATCH_LPM = 1, OG_MATCH_TERNARY = 2, OG_MATCH_RANGE = 3,
       OG_MATCH_OPTIONAL = 4 };

/* A table of `nfields` key fields (0..16), field i of kind kinds[i] (OG_MATCH_*) and widths[i]
 * bits (1..64). NULL on allocation failure or an invalid argument. A keyless table (nfields 0)
 * holds no entries. */
og_table *og_table_new(uint32_t nfields, const uint8_t *kinds, const uint8_t *widths);
void og_table_free(og_table *t);

/* Add an entry. value: the caller's opaque pointer returned by lookups (never NULL).
 * mask[i]: the bits of field i that must equal value_bits[i] (exact: all ones of the width; lpm:
 * the prefix mask; ternary: its mask; optional: all ones or 0). For a range field mask[i] is not
 * read (taken as 0) and the field must satisfy lo[i] <= key[i] <= hi[i]; lo and hi may be NULL when
 * no field is a range (they are not read for other fields). value_bits need not be masked.
 * priority: larger wins; among equal priorities the entry added first wins.
 * Returns 0, or -1 on allocation failure or an invalid argument (a NULL value, a keyless table,
 * NULL lo/hi in a table with a range field). */
int og_table_add(og_table *t, void *value, const uint64_t *value_bits, const uint64_t *mask,
                 const uint64_t *lo, const uint64_t *hi, int64_t priority);

/* Remove the entry added with this value pointer and the same bits, mask, lo, hi and priority.
 * Returns 0, or -1 if there is no such entry. */
int og_table_remove(og_table *t, void *value, const uint64_t *value_bits, const uint64_t *mask,
                    const uint64_t *lo, const uint64_t *hi, int64_t priority);

/* Remove every entry. */
void og_table_clear(og_table *t);

/* The number of entries. */
uint64_t og_table_size(const og_table *t);

/* The winning entry's value for this packet key (nfields words), or NULL if none matches. */
void *og_table_lookup(const og_table *t, const uint64_t *key);

#ifdef __cplusplus
}
#endif

#endif
