/* Packet I/O of the native switch on Linux interfaces, with no system call per packet.
 *
 * Each port is an AF_PACKET socket bound to one interface (ETH_P_ALL), promiscuous, like
 * softswitch/ports.py: frames the switch itself sent are not read back, and a VLAN tag the kernel
 * moved into packet metadata is put back into the frame after the MAC addresses.
 *
 * Receive: a TPACKET_V2 ring per port (OG_IO_RX_FRAMES slots of OG_IO_RX_FRAME bytes). The kernel
 * hands over each frame as soon as it is written and wakes the polling thread if it sleeps, so a
 * frame is seen at once at any rate. (The first version used TPACKET_V3, whose blocks are handed
 * over when full or after a retire timeout of at least 1 ms: at low rates every frame waited up to
 * that timeout, and a round trip through the gateway, four passes through the switch, took
 * 3 ms instead of 0.4.) A frame longer than a slot (a GSO frame of up to 64 KiB from a veth, a
 * jumbo frame) gets its first bytes in the slot with TP_STATUS_COPY, and its whole copy queued on
 * the socket (PACKET_COPY_THRESH), which recv() returns in the slots' order; if the socket's
 * receive buffer is full the kernel makes no copy and the frame is counted as truncated.
 * The number of slots is how long the polling thread may be kept off a CPU before frames are
 * lost: 8,192 slots ride out ~100 ms at 80,000 frames/s (the TPACKET_V3 ring's 8 blocks first
 * chosen lost frames whenever the thread waited more than ~10 ms for a core on a loaded 2-core
 * machine: bench_newflows lost 284 of 32,000 new flows at 16,000/s).
 *
 * Transmit: frames the callback outputs are copied into a per-port batch (the callback's buffers
 * are only valid until its next call) and sent with one sendmmsg per batch, after each round of
 * the ports (up to OG_IO_FRAMES_PER_TURN frames from each) or when the batch is full. sendmmsg
 * rather than a TX ring, measured on veths (Linux 6.18, 64-byte frames, batches of 64): sendmmsg
 * 2.35 Mpps, a TPACKET_V2 TX ring with one send() kick per batch 2.12 Mpps. sendmmsg also needs no
 * second socket (it was measured beside a TPACKET_V3 receive ring, which cannot share its socket
 * with a V2 TX ring), no slot size that caps the frame length, no waiting for slots
 * a slow device still holds (TP_STATUS_SENDING), and it says which frame failed (EMSGSIZE,
 * ENOBUFS) where one bad frame stops a ring kick. Transmission uses the port's receive socket (a
 * socket never reads back what it sent itself; PACKET_IGNORE_OUTGOING, or sll_pkttype
 * PACKET_OUTGOING on kernels without it, drops what other sockets send out of the interface).
 * og_io_send calls send() on the same socket from its own thread: sending on a packet socket
 * takes no socket lock, each call builds its own skb, so the polling thread's batches and
 * og_io_send need no lock between them.
 *
 * Upcalls: a byte ring of OG_IO_UPCALL_BYTES, lock-free single-producer (the polling thread)
 * single-consumer (og_io_pop_upcall, one thread at a time). Records are 8-byte aligned
 * {len, port, data}; one that does not fit before the end of the ring is preceded by a wrap
 * marker. The producer writes the eventfd only when the ring was empty before its push; the
 * consumer, finding the ring empty, clears the eventfd and looks again, with a full fence on both
 * sides so that one of the two always sees the other (no lost wake-up).
 *
 * Counters written by the polling thread have one writer (relaxed atomic stores); those of
 * og_io_send are atomic additions; og_io_get_stats sums them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "og_io.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif
#ifndef TP_STATUS_VLAN_TPID_VALID
#define TP_STATUS_VLAN_TPID_VALID (1 << 6)
#endif

#define OG_IO_RX_FRAME 2048u         /* bytes per ring slot: its header and a 1,500-byte frame */
#define OG_IO_RX_FRAMES 8192u        /* 16 MiB of ring per port (see above) */
#define OG_IO_RX_RING_BLOCK (64u << 10) /* the ring's allocation unit, a multiple of the slot */
#define OG_IO_RX_MAX (256u << 10)    /* the longest frame a port receives (read with recv) */
#define OG_IO_RCVBUF (32 << 20)      /* room for the copies of frames longer than a slot */
#define OG_IO_FRAMES_PER_TURN 64u    /* per port before the next port gets its turn */
#define OG_IO_TX_BATCH 64u           /* frames per sendmmsg */
#define OG_IO_TX_ARENA (256u << 10)  /* bytes of frames per batch; longer frames are errors */
#define OG_IO_SNDBUF (4 << 20)
#define OG_IO_MAX_OUT 64u            /* output frames per processed frame */
#define OG_IO_IDLE_MS 10             /* poll timeout when idle */
#define OG_IO_PORT_MAP 4096u         /* port numbers below this are found by direct index */
#define OG_IO_UPCALL_BYTES (4u << 20) /* a power of two */
#define OG_IO_UPCALL_WRAP 0xFFFFFFFFu

typedef struct io_port {
    uint32_t num;
    int fd;
    uint8_t *ring; /* OG_IO_RX_FRAMES * OG_IO_RX_FRAME, or NULL */
    uint32_t slot; /* the next slot to read */
    /* the transmit batch, polling thread only */
    uint32_t tx_n, tx_used;
    uint8_t *tx_arena;
    struct mmsghdr *tx_msgs;
    struct iovec *tx_iov;
} io_port;

struct og_io {
    uint32_t nports;
    io_port *ports;
    struct pollfd *pfds; /* one per port, then wake_fd */
    uint16_t map[OG_IO_PORT_MAP]; /* port number -> index + 1; 0 if none */
    og_process_fn fn;
    void *ctx;
    int upcall_fd, wake_fd;
    pthread_mutex_t ctl; /* start and stop */
    pthread_t thread;
    int running;
    int stopping;
    pthread_mutex_t stats_lock; /* ring_drops, tid */
    pthread_cond_t tid_known;
    pid_t tid; /* the polling thread's kernel thread id, once it runs; 0 when stopped */
    uint64_t ring_drops;
    /* written by the polling thread only */
    uint64_t rx_frames, tx_frames, tx_errors, upcalls, upcall_drops, truncated;
    /* written by og_io_send (any thread) */
    uint64_t send_frames, send_errors;
    og_frame out[OG_IO_MAX_OUT];
    uint8_t *copy_buf; /* 4 + OG_IO_RX_MAX: a frame longer than a slot, room for its tag */
    uint8_t *up_buf;
    uint64_t up_head __attribute__((aligned(64))); /* written by the producer */
    uint64_t up_tail __attribute__((aligned(64))); /* written by the consumer */
};

/* ------------------------------------------------------------------ helpers */
static void io_errf(char *err, uint32_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* One writer: a plain increment, published for readers on other threads. */
static inline void io_count(uint64_t *c, uint64_t n) {
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static inline uint64_t io_load(const uint64_t *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }

static inline void io_put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void io_eventfd_write(int fd) {
    uint64_t one = 1;
    ssize_t r;
    do r = write(fd, &one, sizeof one);
    while (r < 0 && errno == EINTR);
}

static void io_eventfd_clear(int fd) {
    uint64_t v;
    ssize_t r;
    do r = read(fd, &v, sizeof v);
    while (r < 0 && errno == EINTR);
}

static inline io_port *io_find(og_io *io, uint32_t port) {
    if (port < OG_IO_PORT_MAP) {
        uint16_t i = io->map[port];
        return i ? &io->ports[i - 1] : NULL;
    }
    for (uint32_t i = 0; i < io->nports; i++)
        if (io->ports[i].num == port) return &io->ports[i];
    return NULL;
}

/* ------------------------------------------------------------------ upcall ring (SPSC) */
static void io_upcall_push(og_io *io, uint32_t port, const uint8_t *data, uint32_t len) {
    const uint64_t cap = OG_IO_UPCALL_BYTES;
    if (len > OG_IO_UPCALL_MAX) {
        io_count(&io->upcall_drops, 1);
        return;
    }
    uint64_t rec = 8 + (((uint64_t)len + 7) & ~(uint64_t)7);
    uint64_t old_head = __atomic_load_n(&io->up_head, __ATOMIC_RELAXED), head = old_head;
    uint64_t pos = head & (cap - 1);
    uint64_t pad = cap - pos < rec ? cap - pos : 0;
    uint64_t tail = __atomic_load_n(&io->up_tail, __ATOMIC_ACQUIRE);
    if (head + pad + rec - tail > cap) {
        io_count(&io->upcall_drops, 1);
        return;
    }
    if (pad) {
        uint32_t mark[2] = {OG_IO_UPCALL_WRAP, 0};
        memcpy(io->up_buf + pos, mark, sizeof mark);
        head += pad;
        pos = 0;
    }
    uint32_t hdr[2] = {len, port};
    memcpy(io->up_buf + pos, hdr, sizeof hdr);
    memcpy(io->up_buf + pos + 8, data, len);
    __atomic_store_n(&io->up_head, head + rec, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&io->up_tail, __ATOMIC_RELAXED) == old_head)
        io_eventfd_write(io->upcall_fd);
    io_count(&io->upcalls, 1); /* after the wake-up: counted means visible */
}

int32_t og_io_pop_upcall(og_io *io, uint32_t *port, uint8_t *buf, uint32_t cap) {
    const uint64_t size = OG_IO_UPCALL_BYTES;
    uint64_t tail = __atomic_load_n(&io->up_tail, __ATOMIC_RELAXED);
    int cleared = 0;
    for (;;) {
        uint64_t head = __atomic_load_n(&io->up_head, __ATOMIC_ACQUIRE);
        if (tail == head) {
            if (cleared) return -1;
            io_eventfd_clear(io->upcall_fd);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            cleared = 1;
            continue;
        }
        uint64_t pos = tail & (size - 1);
        uint32_t hdr[2];
        memcpy(hdr, io->up_buf + pos, sizeof hdr);
        if (hdr[0] == OG_IO_UPCALL_WRAP) {
            tail += size - pos;
            __atomic_store_n(&io->up_tail, tail, __ATOMIC_RELEASE);
            continue;
        }
        if (hdr[0] > cap) return -2;
        memcpy(buf, io->up_buf + pos + 8, hdr[0]);
        *port = hdr[1];
        __atomic_store_n(&io->up_tail, tail + 8 + (((uint64_t)hdr[0] + 7) & ~(uint64_t)7),
                         __ATOMIC_RELEASE);
        return (int32_t)hdr[0];
    }
}

int og_io_upcall_fd(og_io *io) { return io->upcall_fd; }

void og_io_notify(og_io *io) { io_eventfd_write(io->upcall_fd); }

/* ------------------------------------------------------------------ transmit */
static int io_wait_writable(int fd, int ms) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    return poll(&p, 1, ms) > 0;
}

static void io_flush(og_io *io, io_port *p) {
    uint32_t i = 0, n = p->tx_n;
    int waited = 0;
    while (i < n) {
        int r = sendmmsg(p->fd, p->tx_msgs + i, n - i, MSG_DONTWAIT);
        if (r > 0) {
            io_count(&io->tx_frames, (uint64_t)r);
            i += (uint32_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!waited && io_wait_writable(p->fd, 1)) {
                waited = 1;
                continue;
            }
            io_count(&io->tx_errors, n - i); /* the socket's send buffer stays full */
            break;
        }
        io_count(&io->tx_errors, 1); /* this frame fails (e.g. EMSGSIZE, ENETDOWN): skip it */
        i++;
    }
    p->tx_n = 0;
    p->tx_used = 0;
}

static void io_flush_all(og_io *io) {
    for (uint32_t i = 0; i < io->nports; i++)
        if (io->ports[i].tx_n) io_flush(io, &io->ports[i]);
}

static void io_stage(og_io *io, io_port *p, const uint8_t *data, uint32_t len) {
    uint32_t room = (len + 15u) & ~15u;
    if (len > OG_IO_TX_ARENA) {
        io_count(&io->tx_errors, 1);
        return;
    }
    if (p->tx_n == OG_IO_TX_BATCH || p->tx_used + len > OG_IO_TX_ARENA) io_flush(io, p);
    uint8_t *dst = p->tx_arena + p->tx_used;
    memcpy(dst, data, len);
    p->tx_iov[p->tx_n].iov_base = dst;
    p->tx_iov[p->tx_n].iov_len = len;
    p->tx_n++;
    p->tx_used += room;
    if (p->tx_used > OG_IO_TX_ARENA) p->tx_used = OG_IO_TX_ARENA;
}

int og_io_send(og_io *io, uint32_t port, const uint8_t *frame, uint32_t len) {
    io_port *p = io_find(io, port);
    if (!p) return -1;
    int waited = 0;
    for (;;) {
        ssize_t r = send(p->fd, frame, len, MSG_DONTWAIT);
        if (r >= 0) {
            __atomic_fetch_add(&io->send_frames, 1, __ATOMIC_RELAXED);
            return 0;
        }
        int e = errno;
        if (e == EINTR) continue;
        if ((e == EAGAIN || e == EWOULDBLOCK) && !waited) {
            waited = 1;
            io_wait_writable(p->fd, 10);
            continue;
        }
        __atomic_fetch_add(&io->send_errors, 1, __ATOMIC_RELAXED);
        return -e;
    }
}

/* ------------------------------------------------------------------ receive */
static void io_rx_frame(og_io *io, io_port *p, struct tpacket2_hdr *h) {
    const uint32_t hdr_end = TPACKET_ALIGN(sizeof(struct tpacket2_hdr));
    const struct sockaddr_ll *sll = (const void *)((uint8_t *)h + hdr_end);
    const uint32_t status = h->tp_status;
    uint8_t *data = (uint8_t *)h + h->tp_mac;
    uint32_t len = h->tp_snaplen, headroom = h->tp_mac >= hdr_end + sizeof *sll + 4;
    if (status & TP_STATUS_COPY) { /* the whole frame waits on the socket, in slot order */
        ssize_t r;
        do r = recv(p->fd, io->copy_buf + 4, OG_IO_RX_MAX, MSG_DONTWAIT | MSG_TRUNC);
        while (r < 0 && errno == EINTR);
        if (r < 0 || (size_t)r > OG_IO_RX_MAX || (uint32_t)r != h->tp_len) {
            io_count(&io->truncated, 1);
            return;
        }
        data = io->copy_buf + 4;
        len = (uint32_t)r;
        headroom = 1;
    } else if (len < h->tp_len) { /* longer than a slot, and no room on the socket for a copy */
        io_count(&io->truncated, 1);
        return;
    }
    if (sll->sll_pkttype == PACKET_OUTGOING) return;
    if ((status & TP_STATUS_VLAN_VALID) && len >= 12) {
        uint16_t tpid = (status & TP_STATUS_VLAN_TPID_VALID) ? (uint16_t)h->tp_vlan_tpid : 0x8100;
        uint16_t tci = (uint16_t)h->tp_vlan_tci;
        if (headroom) { /* room before the frame, past the header and address already read */
            memmove(data - 4, data, 12);
            data -= 4;
        } else {
            memmove(io->copy_buf, data, 12);
            memmove(io->copy_buf + 16, data + 12, len - 12);
            data = io->copy_buf;
        }
        io_put16(data + 12, tpid);
        io_put16(data + 14, tci);
        len += 4;
    }
    io_count(&io->rx_frames, 1);
    uint32_t n = io->fn(io->ctx, p->num, data, len, io->out, OG_IO_MAX_OUT);
    if (n > OG_IO_MAX_OUT) n = OG_IO_MAX_OUT;
    for (uint32_t i = 0; i < n; i++) {
        const og_frame *f = &io->out[i];
        if (!f->data || !f->len) continue;
        io_port *q = io_find(io, f->port);
        if (q)
            io_stage(io, q, f->data, f->len);
        else
            io_upcall_push(io, f->port, f->data, f->len);
    }
}

/* The port's ready slots (at most `max`), each handed back to the kernel after its frame. */
static uint32_t io_drain(og_io *io, io_port *p, uint32_t max) {
    uint32_t done = 0;
    while (done < max) {
        struct tpacket2_hdr *h = (void *)(p->ring + (size_t)p->slot * OG_IO_RX_FRAME);
        if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) break;
        io_rx_frame(io, p, h);
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        p->slot = (p->slot + 1) % OG_IO_RX_FRAMES;
        done++;
    }
    return done;
}

static void *io_loop(void *arg) {
    og_io *io = arg;
    uint32_t n = io->nports;
    pthread_mutex_lock(&io->stats_lock);
    io->tid = (pid_t)syscall(SYS_gettid);
    pthread_cond_broadcast(&io->tid_known);
    pthread_mutex_unlock(&io->stats_lock);
    while (!__atomic_load_n(&io->stopping, __ATOMIC_ACQUIRE)) {
        uint32_t work = 0;
        for (uint32_t i = 0; i < n; i++) work += io_drain(io, &io->ports[i], OG_IO_FRAMES_PER_TURN);
        io_flush_all(io);
        if (work) continue;
        if (poll(io->pfds, n + 1, OG_IO_IDLE_MS) <= 0) continue;
        for (uint32_t i = 0; i < n; i++) {
            if (io->pfds[i].revents & POLLERR) { /* e.g. ENETDOWN: clear it, or poll spins */
                int e = 0;
                socklen_t l = sizeof e;
                getsockopt(io->pfds[i].fd, SOL_SOCKET, SO_ERROR, &e, &l);
            }
        }
        if (io->pfds[n].revents & POLLIN) io_eventfd_clear(io->wake_fd);
    }
    io_flush_all(io);
    pthread_mutex_lock(&io->stats_lock);
    io->tid = 0;
    pthread_mutex_unlock(&io->stats_lock);
    return NULL;
}

int og_io_thread_id(og_io *io) {
    pthread_mutex_lock(&io->ctl); /* not stopped meanwhile */
    int tid = 0;
    if (io->running && !__atomic_load_n(&io->stopping, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&io->stats_lock);
        while (!io->tid) pthread_cond_wait(&io->tid_known, &io->stats_lock);
        tid = (int)io->tid;
        pthread_mutex_unlock(&io->stats_lock);
    }
    pthread_mutex_unlock(&io->ctl);
    return tid;
}

/* ------------------------------------------------------------------ life cycle */
static int io_port_open(io_port *p, const char *ifname, char *err, uint32_t errlen) {
    const char *step = "socket (root needed?)";
    size_t ring_len = (size_t)OG_IO_RX_FRAMES * OG_IO_RX_FRAME;
    if (!ifname || !*ifname || strlen(ifname) >= IF_NAMESIZE) {
        io_errf(err, errlen, "interface %s%s%s: invalid interface name", ifname ? "'" : "",
                ifname ? ifname : "(null)", ifname ? "'" : "");
        return -EINVAL;
    }
    unsigned ifindex = if_nametoindex(ifname);
    if (!ifindex) {
        int e = errno ? errno : ENODEV;
        io_errf(err, errlen, "interface '%s': %s", ifname, strerror(e));
        return -e;
    }
    p->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0); /* no protocol: nothing queued yet */
    if (p->fd < 0) goto fail;
    step = "PACKET_VERSION TPACKET_V2";
    int v = TPACKET_V2;
    if (setsockopt(p->fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v)) goto fail;
    step = "PACKET_COPY_THRESH";
    v = 1;
    if (setsockopt(p->fd, SOL_PACKET, PACKET_COPY_THRESH, &v, sizeof v)) goto fail;
    v = OG_IO_RCVBUF;
    if (setsockopt(p->fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof v))
        setsockopt(p->fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
    step = "PACKET_RX_RING";
    struct tpacket_req req = {
        .tp_block_size = OG_IO_RX_RING_BLOCK,
        .tp_block_nr = OG_IO_RX_FRAMES / (OG_IO_RX_RING_BLOCK / OG_IO_RX_FRAME),
        .tp_frame_size = OG_IO_RX_FRAME,
        .tp_frame_nr = OG_IO_RX_FRAMES,
    };
    if (setsockopt(p->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req)) goto fail;
    step = "mmap of the receive ring";
    void *ring = mmap(NULL, ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, p->fd, 0);
    if (ring == MAP_FAILED) goto fail;
    p->ring = ring;
    v = 1; /* kernels before 4.20 lack it: sll_pkttype is checked for each frame anyway */
    setsockopt(p->fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &v, sizeof v);
    v = OG_IO_SNDBUF;
    if (setsockopt(p->fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof v))
        setsockopt(p->fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    step = "bind";
    struct sockaddr_ll sll = {
        .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = (int)ifindex};
    if (bind(p->fd, (struct sockaddr *)&sll, sizeof sll)) goto fail;
    step = "promiscuous mode";
    struct packet_mreq mreq = {.mr_ifindex = (int)ifindex, .mr_type = PACKET_MR_PROMISC};
    if (setsockopt(p->fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq, sizeof mreq)) goto fail;
    step = "allocation of the transmit batch";
    p->tx_arena = malloc(OG_IO_TX_ARENA);
    p->tx_msgs = calloc(OG_IO_TX_BATCH, sizeof *p->tx_msgs);
    p->tx_iov = calloc(OG_IO_TX_BATCH, sizeof *p->tx_iov);
    if (!p->tx_arena || !p->tx_msgs || !p->tx_iov) {
        errno = ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < OG_IO_TX_BATCH; i++) {
        p->tx_msgs[i].msg_hdr.msg_iov = &p->tx_iov[i];
        p->tx_msgs[i].msg_hdr.msg_iovlen = 1;
    }
    return 0;
fail:;
    int e = errno;
    io_errf(err, errlen, "interface '%s': %s: %s", ifname, step, strerror(e));
    return -e;
}

static void io_port_close(io_port *p) {
    if (p->ring) munmap(p->ring, (size_t)OG_IO_RX_FRAMES * OG_IO_RX_FRAME);
    if (p->fd >= 0) close(p->fd);
    free(p->tx_arena);
    free(p->tx_msgs);
    free(p->tx_iov);
    p->ring = NULL;
    p->fd = -1;
}

og_io *og_io_new(uint32_t nports, const uint32_t *port_nums, const char *const *ifnames,
                 og_process_fn fn, void *ctx, char *err, uint32_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!fn || (nports && (!port_nums || !ifnames)) || nports > 0xFFFF) {
        io_errf(err, errlen, "og_io_new: %s",
                !fn ? "no process callback" : nports > 0xFFFF ? "too many ports" : "no port list");
        return NULL;
    }
    og_io *io = aligned_alloc(64, (sizeof *io + 63) & ~(size_t)63); /* up_head, up_tail */
    if (io) memset(io, 0, sizeof *io);
    if (!io) {
        io_errf(err, errlen, "og_io_new: %s", strerror(ENOMEM));
        return NULL;
    }
    pthread_mutex_init(&io->ctl, NULL);
    pthread_mutex_init(&io->stats_lock, NULL);
    pthread_cond_init(&io->tid_known, NULL);
    io->fn = fn;
    io->ctx = ctx;
    io->upcall_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    io->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    io->ports = calloc(nports ? nports : 1, sizeof *io->ports);
    io->pfds = calloc((size_t)nports + 1, sizeof *io->pfds);
    io->up_buf = malloc(OG_IO_UPCALL_BYTES);
    io->copy_buf = malloc(OG_IO_RX_MAX + 4);
    if (io->upcall_fd < 0 || io->wake_fd < 0 || !io->ports || !io->pfds || !io->up_buf ||
        !io->copy_buf) {
        io_errf(err, errlen, "og_io_new: %s", strerror(errno ? errno : ENOMEM));
        og_io_free(io);
        return NULL;
    }
    for (uint32_t i = 0; i < nports; i++) {
        io_port *p = &io->ports[i];
        p->fd = -1;
        if (io_find(io, port_nums[i])) {
            io_errf(err, errlen, "interface '%s': port %u is given twice",
                    ifnames[i] ? ifnames[i] : "(null)", port_nums[i]);
            og_io_free(io);
            return NULL;
        }
        p->num = port_nums[i];
        io->nports = i + 1; /* so that og_io_free closes what this opened */
        if (io_port_open(p, ifnames[i], err, errlen)) {
            og_io_free(io);
            return NULL;
        }
        if (p->num < OG_IO_PORT_MAP) io->map[p->num] = (uint16_t)(i + 1);
        io->pfds[i].fd = p->fd;
        io->pfds[i].events = POLLIN;
    }
    io->pfds[nports].fd = io->wake_fd;
    io->pfds[nports].events = POLLIN;
    return io;
}

int og_io_start(og_io *io) {
    pthread_mutex_lock(&io->ctl);
    if (io->running) {
        pthread_mutex_unlock(&io->ctl);
        return -EALREADY;
    }
    __atomic_store_n(&io->stopping, 0, __ATOMIC_RELEASE);
    io_eventfd_clear(io->wake_fd);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* signals go to the caller's threads */
    int rc = pthread_create(&io->thread, NULL, io_loop, io);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rc) {
        pthread_setname_np(io->thread, "og-io");
        io->running = 1;
    }
    pthread_mutex_unlock(&io->ctl);
    return -rc;
}

void og_io_stop(og_io *io) {
    pthread_mutex_lock(&io->ctl);
    if (io->running) {
        __atomic_store_n(&io->stopping, 1, __ATOMIC_RELEASE);
        if (!pthread_equal(pthread_self(), io->thread)) { /* from the callback: cannot join */
            io_eventfd_write(io->wake_fd);
            pthread_join(io->thread, NULL);
            io->running = 0;
        }
    }
    pthread_mutex_unlock(&io->ctl);
}

void og_io_free(og_io *io) {
    if (!io) return;
    og_io_stop(io);
    for (uint32_t i = 0; i < io->nports; i++) io_port_close(&io->ports[i]);
    if (io->upcall_fd >= 0) close(io->upcall_fd);
    if (io->wake_fd >= 0) close(io->wake_fd);
    free(io->ports);
    free(io->pfds);
    free(io->up_buf);
    free(io->copy_buf);
    pthread_mutex_destroy(&io->ctl);
    pthread_mutex_destroy(&io->stats_lock);
    pthread_cond_destroy(&io->tid_known);
    free(io);
}

void og_io_get_stats(og_io *io, og_io_stats *out) {
    pthread_mutex_lock(&io->stats_lock);
    for (uint32_t i = 0; i < io->nports; i++) {
        struct tpacket_stats st;
        socklen_t l = sizeof st;
        memset(&st, 0, sizeof st);
        if (!getsockopt(io->ports[i].fd, SOL_PACKET, PACKET_STATISTICS, &st, &l))
            io->ring_drops += st.tp_drops; /* reset by the read */
    }
    out->rx_ring_drops = io->ring_drops + io_load(&io->truncated);
    pthread_mutex_unlock(&io->stats_lock);
    out->rx_frames = io_load(&io->rx_frames);
    out->tx_frames = io_load(&io->tx_frames) + io_load(&io->send_frames);
    out->tx_errors = io_load(&io->tx_errors) + io_load(&io->send_errors);
    out->upcalls = io_load(&io->upcalls);
    out->upcall_drops = io_load(&io->upcall_drops);
}
