"""What the native port layer lost is reported: the ctypes view of og_io_stats matches og_io.h,
and the upcall thread's report warns when a loss grows, with the totals, at most once per
period, and sums everything up when the ports close. (Also: the rows of the digest batch are as
wide as C's.)"""

from __future__ import annotations

import re
from ctypes import sizeof as ct_sizeof
from pathlib import Path

from softswitch.native.dataplane import (
    DIGEST_FIELDS,
    DIGEST_P4DATA_MAX,
    IO_STATS,
    IoStats,
    LossReport,
)

NATIVE = Path(__file__).resolve().parents[2] / "softswitch" / "native"


def test_io_stats_fields_are_og_io_h_s_in_order() -> None:
    header = (NATIVE / "og_io.h").read_text()
    body = re.search(r"typedef struct \{\s*uint64_t ([^;]+);\s*\} og_io_stats;", header)
    assert body, "no og_io_stats of uint64_t fields in og_io.h"
    names = [n.strip() for n in body.group(1).split(",")]
    assert list(IO_STATS) == names
    assert ct_sizeof(IoStats) == 8 * len(names)


def counts(**losses: int) -> dict[str, int]:
    base = dict.fromkeys(("rx_ring_drops", "upcall_drops", "tx_errors", "digest_drops"), 0)
    return {**base, "rx_frames": 100, "tx_frames": 90, **losses}


def test_nothing_lost_reports_nothing() -> None:
    report = LossReport(every=5.0)
    assert report.check(counts(), now=0.0) is None
    assert report.check(counts(), now=100.0) is None


def test_a_growing_loss_is_reported_with_totals_at_most_once_per_period() -> None:
    report = LossReport(every=5.0)
    first = report.check(counts(rx_ring_drops=3), now=10.0)
    assert first is not None
    assert "3 frames the receive rings could not hold" in first
    assert "0 digests the digest ring could not hold" in first
    # grown again, but within the period: nothing; after it: the new totals
    assert report.check(counts(rx_ring_drops=7, digest_drops=2), now=12.0) is None
    later = report.check(counts(rx_ring_drops=7, digest_drops=2), now=15.0)
    assert later is not None
    assert "7 frames the receive rings" in later and "2 digests" in later
    # no growth since the last report: nothing, however long after
    assert report.check(counts(rx_ring_drops=7, digest_drops=2), now=60.0) is None
    assert report.check(counts(rx_ring_drops=7, digest_drops=2, tx_errors=1), now=61.0)


def test_final_summary_names_traffic_and_every_loss() -> None:
    text = LossReport().final(counts(upcall_drops=4, tx_errors=1))
    assert text.startswith("port I/O: 100 frames received, 90 sent; lost: ")
    assert "4 slow-path frames the upcall ring could not hold" in text
    assert "1 frames not sent" in text


def test_digest_batch_rows_are_og_rt_h_s_width() -> None:
    header = (NATIVE / "og_rt.h").read_text()
    width = re.search(r"#define OG_DIGEST_MAX_FIELDS (\d+)", header)
    assert width, "no OG_DIGEST_MAX_FIELDS in og_rt.h"
    assert int(width.group(1)) == DIGEST_FIELDS


def test_encoded_digest_bound_is_og_dp_c_s() -> None:
    """The buffer Python gives og_dp_pop_digests_p4data is sized by og_dp.c's bound on one
    encoded sample (C checks the capacity it is given, so a mismatch only costs batches)."""
    source = (NATIVE / "og_dp.c").read_text()
    bound = re.search(
        r"#define OG_DIGEST_P4DATA_MAX \((\d+) \+ OG_DIGEST_MAX_FIELDS \* (\d+)\)", source
    )
    assert bound, "no OG_DIGEST_P4DATA_MAX in og_dp.c"
    assert int(bound.group(1)) + DIGEST_FIELDS * int(bound.group(2)) == DIGEST_P4DATA_MAX
