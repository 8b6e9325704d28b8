/* Packet I/O of the native switch on Linux interfaces: one AF_PACKET socket per port with a
 * TPACKET_V2 receive ring, transmission batched with sendmmsg, one polling thread for all ports,
 * and a bounded queue of frames for the slow path (Python). See og_io.c for the mechanism.
 *
 * Threads: the process callback runs on the polling thread only. og_io_send, og_io_notify and
 * og_io_get_stats may be called from any thread; og_io_pop_upcall from one thread at a time (the
 * upcall queue has one consumer). og_io_start, og_io_stop and og_io_free must not be called from
 * the callback.
 */
#ifndef OG_IO_H
#define OG_IO_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OG_IO_API __attribute__((visibility("default")))

typedef struct { uint32_t port; uint32_t len; const uint8_t *data; } og_frame;

/* Process one received frame; write up to max_out output frames into out[] (their data must stay
   valid until the next call of this callback on the same thread) and return how many. */
typedef uint32_t (*og_process_fn)(void *ctx, uint32_t in_port, const uint8_t *frame, uint32_t len,
                                  og_frame *out, uint32_t max_out);

typedef struct og_io og_io;

/* ports[i] is switch port number port_nums[i] on interface ifnames[i]. Returns NULL and fills
   err (a message naming the interface and the errno text) on failure. */
OG_IO_API og_io *og_io_new(uint32_t nports, const uint32_t *port_nums, const char *const *ifnames,
                           og_process_fn fn, void *ctx, char *err, uint32_t errlen);
/* Starts the polling thread; 0 or -errno (-EALREADY if it runs). */
OG_IO_API int og_io_start(og_io *io);
/* The polling thread's kernel thread id (for its scheduling priority: setpriority, sched_setattr),
   waiting until the thread runs; 0 if it is not started. */
OG_IO_API int og_io_thread_id(og_io *io);
/* Stops and joins the thread (idempotent). */
OG_IO_API void og_io_stop(og_io *io);
/* Stops if needed, closes sockets, unmaps. */
OG_IO_API void og_io_free(og_io *io);

/* Frames the callback output for a port that has no interface (e.g. the CPU port) are queued
   for the slow path (Python) in a bounded ring (OG_IO_UPCALL_BYTES of frames of up to
   OG_IO_UPCALL_MAX bytes each; when full, or for a longer frame, the frame is dropped and
   counted). upcall_fd is an eventfd readable while the ring is non-empty; it may stay readable
   after the last frame is popped, until a pop returns -1, so on each wake-up pop until -1. */
#define OG_IO_UPCALL_MAX 16384
OG_IO_API int og_io_upcall_fd(og_io *io);
/* Pop one queued frame: copies it into buf (cap bytes), sets *port, returns its length, or -1
   if the ring is empty (and then clears the eventfd), or -2 if cap is too small (the frame stays
   queued; a buffer of OG_IO_UPCALL_MAX bytes is always large enough). */
OG_IO_API int32_t og_io_pop_upcall(og_io *io, uint32_t *port, uint8_t *buf, uint32_t cap);
/* Wake the upcall fd (the process callback calls this after queueing something of its own, e.g.
   a digest, that the slow path must read). Safe from any thread. */
OG_IO_API void og_io_notify(og_io *io);

/* Transmit a frame on a port from another thread (packet-out already processed by the caller).
   Returns 0, -1 if the port has no interface, -errno on a send error. Thread-safe with the
   polling thread. */
OG_IO_API int og_io_send(og_io *io, uint32_t port, const uint8_t *frame, uint32_t len);

/* Counters since og_io_new. rx_ring_drops: frames the kernel could not put in a receive ring
   (tp_drops of PACKET_STATISTICS, accumulated) plus frames longer than OG_IO_RX_MAX
   (256 KiB), or longer than a ring slot when the socket had no room for their copy. */
typedef struct {
    uint64_t rx_frames, tx_frames, tx_errors, upcalls, upcall_drops, rx_ring_drops;
} og_io_stats;
OG_IO_API void og_io_get_stats(og_io *io, og_io_stats *out);

#ifdef __cplusplus
}
#endif

#endif
