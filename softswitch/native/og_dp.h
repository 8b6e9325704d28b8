/* The state of one loaded program (one per P4Runtime pipeline commit), generic over programs:
 * the generated file defines the sizes (OG_NTABLES ...) and includes this. */
#ifndef OG_DP_H
#define OG_DP_H

#include "og_io.h"
#include "og_rt.h"

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

/* The exported API (og_dp.c), bound by softswitch/native/dataplane.py with ctypes. Declared here
 * so that og_dp.c builds with -Wmissing-prototypes and no function is used before its
 * declaration (an implicit declaration is an error in C99 and later). */
#define OG_API __attribute__((visibility("default")))

OG_API og_dp *og_dp_new(void);
OG_API void og_dp_free(og_dp *dp);
OG_API int32_t og_dp_process(og_dp *dp, uint32_t port, const uint8_t *data, uint32_t len,
                             uint32_t *out_port);
OG_API uint8_t *og_dp_obuf(og_dp *dp);
OG_API int og_dp_io_open(og_dp *dp, uint32_t nports, const uint32_t *port_nums,
                         const char *const *ifnames, char *err, uint32_t errlen);
OG_API og_io *og_dp_io(og_dp *dp);
OG_API void og_dp_io_close(og_dp *dp);
OG_API uint32_t og_dp_pop_digests(og_dp *dp, uint32_t *ids, uint32_t *counts, uint64_t *values,
                                  uint32_t max);
OG_API uint32_t og_dp_pop_digests_p4data(og_dp *dp, uint32_t *ids, uint32_t *ends, uint8_t *buf,
                                         uint32_t cap, uint32_t max);
OG_API void og_dp_push_digest(og_dp *dp, uint32_t id, uint32_t n, const uint64_t *values);
OG_API uint64_t og_dp_digest_drops(og_dp *dp);
OG_API void og_dp_clear_registers(og_dp *dp);
OG_API void og_dp_set_default(og_dp *dp, uint32_t i, og_entry *e, og_entry *old);
OG_API uint64_t *og_dp_register(og_dp *dp, uint32_t i);
OG_API uint64_t *og_dp_counter(og_dp *dp, uint32_t i);
OG_API og_meter *og_dp_meter(og_dp *dp, uint32_t i);
OG_API og_entry *og_entry_new(uint32_t ndata, int32_t meter_packets);
OG_API void og_entry_free(og_entry *e);
OG_API int og_entry_set_members(og_dp *dp, og_entry *e, uint32_t n, uint32_t stride,
                                const uint64_t *words, uint32_t is_group);
OG_API void og_meter_configure(og_dp *dp, og_meter *m, double cir, int64_t cburst, double pir,
                               int64_t pburst);
OG_API void og_meter_clear(og_dp *dp, og_meter *m);
OG_API uint32_t og_meter_execute_api(og_dp *dp, og_meter *m, uint32_t nbytes);
OG_API uint32_t og_sizeof_entry(void);
OG_API uint32_t og_sizeof_meter(void);
OG_API uint64_t og_dp_bench(og_dp *dp, uint32_t port, const uint8_t *blob, const uint32_t *lens,
                            uint32_t n, uint32_t rounds);
OG_API og_entry *og_entry_insert(og_dp *dp, uint32_t ti, const void *blob, uint32_t nmembers,
                                 uint32_t stride, const uint64_t *members, uint32_t is_group);
OG_API int og_entry_remove(og_dp *dp, uint32_t ti, og_entry *e, const void *blob);

#endif
