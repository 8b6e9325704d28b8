"""The SPM's reading of the kernel's NFQUEUE counters (/proc/net/netfilter/nfnetlink_queue)."""

from __future__ import annotations

from pathlib import Path

from spm.daemon import KernelQueue, kernel_queue

# Two queues as the kernel lists them: number, listener port id, depth, copy mode, copy range,
# queue dropped, user dropped, last packet id, 1.
PROC = """\
    0  12345     0 2 65531     0     0       17  1
    3  23456    12 2 65531    40     2    99999  1
"""


def test_a_queue_counters_are_read_from_its_line(tmp_path: Path) -> None:
    proc = tmp_path / "nfnetlink_queue"
    proc.write_text(PROC)
    got = kernel_queue(3, proc)
    assert got == KernelQueue(depth=12, queue_dropped=40, user_dropped=2)
    assert got.dropped == 42
    assert kernel_queue(0, proc) == KernelQueue(0, 0, 0)


def test_an_unbound_queue_or_no_file_reads_as_zeros(tmp_path: Path) -> None:
    proc = tmp_path / "nfnetlink_queue"
    proc.write_text(PROC)
    assert kernel_queue(7, proc) == KernelQueue()
    assert kernel_queue(3, tmp_path / "absent") == KernelQueue()
    proc.write_text("    3  1 garbage\n")
    assert kernel_queue(3, proc) == KernelQueue()
