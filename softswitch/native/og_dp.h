/* The state of one loaded program (one per P4Runtime pipeline commit), generic over programs:
 * the generated file defines the sizes (OG_NTABLES ...) and includes this. */
#ifndef OG_DP_H
#define OG_DP_H

#include "og_io.h"

#define OG_SCRATCH 70000
#define OG_OBUF (OG_MAX_HEADERS + 65600)

typedef struct og_dp {
    pthread_mutex_t lock; /* held for each packet and by Python around table writes */
    int64_t start_ns;
    og_table *t[OG_NTABLES];
    og_entry *def[OG_NTABLES];
    uint64_t *reg[OG_NREGS];
    uint64_t reg_size[OG_NREGS];
    uint64_t *ctr[OG_NCTRS]; /* packets, bytes per cell */
    og_meter *mtr[OG_NMTRS];
    og_digest_ring digests;
    uint64_t rng;
    og_io *io;
    uint8_t scratch[OG_SCRATCH];
    uint8_t obuf_py[OG_OBUF];
    uint8_t obuf_io[OG_OBUF];
} og_dp;

#endif
