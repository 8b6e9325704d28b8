"""A paced frame sender in C, for the benchmarks that need more packets per second than a
Python loop can send (one `send()` per frame tops out near 100k frames/s here).

`c_send(ifname, frames, rate, seconds)` sends `frames` round robin on a raw AF_PACKET socket
bound to `ifname` at `rate` frames/s (0: as fast as it can) for `seconds`, in `sendmmsg` batches
of up to 32, sleeping when ahead of the schedule; it returns (frames sent, seconds taken). The
program is compiled once per process with the system C compiler (`available()` says whether
there is one).
"""

from __future__ import annotations

import atexit
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

SOURCE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#define B 32
#define MAX_FRAMES (1u << @MAX_FRAMES_LOG2@)
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
/* sender IFNAME FRAMES_FILE RATE SECONDS; FRAMES_FILE: (u32 length, bytes)* */
int main(int argc, char **argv) {
    if (argc != 5) return 2;
    FILE *in = fopen(argv[2], "rb");
    if (!in) { perror(argv[2]); return 1; }
    static unsigned char data[128 << 20];
    static uint32_t off[MAX_FRAMES], len[MAX_FRAMES];
    size_t used = 0;
    unsigned n = 0;
    uint32_t l;
    while (n < MAX_FRAMES && fread(&l, 4, 1, in) == 1) {
        if (used + l > sizeof data || fread(data + used, 1, l, in) != l) break;
        off[n] = (uint32_t)used; len[n] = l; used += l; n++;
    }
    fclose(in);
    if (!n) return 1;
    double rate = atof(argv[3]), seconds = atof(argv[4]);
    int fd = socket(AF_PACKET, SOCK_RAW, 0), v = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof v);
    struct sockaddr_ll a = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                            .sll_ifindex = (int)if_nametoindex(argv[1])};
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a)) { perror(argv[1]); return 1; }
    struct iovec iov[B];
    struct mmsghdr m[B];
    memset(m, 0, sizeof m);
    unsigned long long sent = 0;
    unsigned next = 0;
    double t0 = now(), t = t0;
    while ((t = now()) - t0 < seconds) {
        if (rate > 0) {
            double ahead = (double)sent - (t - t0) * rate;
            if (ahead >= 1) {
                struct timespec ts = {0, (long)(ahead / rate * 1e9)};
                if (ts.tv_nsec > 1000000) ts.tv_nsec = 1000000;
                nanosleep(&ts, NULL);
                continue;
            }
        }
        unsigned k = B;
        if (rate > 0) {
            double due = (t - t0) * rate - (double)sent + 1;
            if (due < k) k = due < 1 ? 1 : (unsigned)due;
        }
        unsigned start = next;
        for (unsigned i = 0; i < k; i++) {
            iov[i].iov_base = data + off[next]; iov[i].iov_len = len[next];
            m[i].msg_hdr.msg_iov = &iov[i]; m[i].msg_hdr.msg_iovlen = 1;
            next = next + 1 < n ? next + 1 : 0;
        }
        int r = sendmmsg(fd, m, k, MSG_DONTWAIT);
        if (r > 0) {
            sent += (unsigned)r;
            next = (unsigned)((start + (unsigned)r) % n);
        } else {
            next = start;
            struct pollfd p = {fd, POLLOUT, 0};
            poll(&p, 1, 1);
        }
    }
    printf("%llu %.6f\n", sent, now() - t0);
    return 0;
}
"""

# frames the sender reads from its file (its arrays' size)
MAX_FRAMES_LOG2 = 19
MAX_FRAMES = 1 << MAX_FRAMES_LOG2
_BINARIES: dict[str, Path] = {}


def available() -> bool:
    return shutil.which("cc") is not None


def binary() -> Path:
    """The sender program, compiled on first use: `sender IFNAME FRAMES_FILE RATE SECONDS`."""
    known = _BINARIES.get("sender")
    if known is None or not known.exists():
        workdir = Path(tempfile.mkdtemp(prefix="og-csender-"))
        atexit.register(shutil.rmtree, workdir, True)  # each process left one behind in /tmp
        (workdir / "sender.c").write_text(SOURCE.replace("@MAX_FRAMES_LOG2@", str(MAX_FRAMES_LOG2)))
        out = workdir / "sender"
        subprocess.run(
            ["cc", "-O2", "-w", str(workdir / "sender.c"), "-o", str(out)],
            check=True,
            capture_output=True,
        )
        _BINARIES["sender"] = out
        known = out
    return known


def c_send(ifname: str, frames: Sequence[bytes], rate: float, seconds: float) -> tuple[int, float]:
    """Send `frames` round robin at `rate` frames/s for `seconds`; (frames sent, seconds)."""
    program = binary()
    with tempfile.NamedTemporaryFile(suffix=".frames") as f:
        write_frames(Path(f.name), frames)
        proc = subprocess.run(
            [str(program), ifname, f.name, str(rate), str(seconds)],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise OSError(f"sender on {ifname}: {proc.stderr.strip() or proc.returncode}")
    sent, took = proc.stdout.split()
    return int(sent), float(took)


def write_frames(path: Path, frames: Sequence[bytes]) -> None:
    """The sender's frames file: each frame as (u32 length, bytes); at most 262,144 are read."""
    path.write_bytes(b"".join(struct.pack("=I", len(x)) + x for x in frames))
