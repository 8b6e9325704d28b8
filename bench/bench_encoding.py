"""Session entries to a serialised WriteRequest: the generated protobuf classes (what the
controller does) against Updates serialised by hand (its former session path), same entries.

Each round encodes 4,096 session entries (a full Write of the controller: 2,048 sessions, both
directions, forward action with its parameters and an idle timeout) into one WriteRequest and
serialises it, as gRPC does before sending it:

* generated, in place: `SessionEncoder.fill`, each Update built in the request (the controller);
* generated, copied: `update_of(INSERT, SessionEncoder.entry(...))` appended to the request (how
  the controller writes everything else, which is never thousands of entries);
* hand, merged: Updates serialised by hand (field tags and varints of p4runtime.proto, below),
  framed and merged into the request, then serialised (the former session path);
* hand, bytes only: the same without the request message at all (the most a hand path could
  gain: it would need its own gRPC serializer).

The bytes are checked identical before anything is timed.

    .venv/bin/python -m bench.bench_encoding [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from finsy.proto import p4i, p4r
from google.protobuf import text_format
from google.protobuf.internal import api_implementation

from controller.session_encoding import SessionEncoder, SessionUpdate
from opengate.p4info import P4Schema
from opengate.p4rt import update_of
from softswitch.p4rt_common import canonical, varint

P4INFO = Path(__file__).resolve().parents[1] / "p4src/build/opengate.p4info.txtpb"
ENTRIES = 4096
TIMEOUT_NS = 30 * 10**9


def _encoder() -> SessionEncoder:
    info = p4i.P4Info()
    text_format.Parse(P4INFO.read_text(), info)
    return SessionEncoder(P4Schema(info))


def _keys() -> list[tuple[int, int, int, int, int]]:
    return [(0x0A000001 + i % 250, 0xCB007107, 6, 10000 + i, 80) for i in range(ENTRIES)]


def _params(encoder: SessionEncoder) -> dict[str, int]:
    return {name: (0x020000000001 if "mac" in name else 3) for name, _ in encoder.params}


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def _hand_updates(encoder: SessionEncoder, keys: list[tuple[int, int, int, int, int]]) -> bytes:
    """The WriteRequest.updates field (4) of INSERTs serialised by hand; tags are
    (field number << 3) | wire type, after p4runtime.proto."""
    params = _params(encoder)
    table = b"\x08" + varint(encoder.table_id)  # TableEntry.table_id
    fields = [b"\x08" + varint(f) for f in encoder.fields]  # FieldMatch.field_id
    action_id = b"\x08" + varint(encoder.forward_id)  # Action.action_id
    param_ids = [(name, b"\x10" + varint(pid)) for name, pid in encoder.params]
    out = []
    for key in keys:  # each entry's parameters encoded anew, as sessions differ in them
        match = b"".join(
            _delimited(b"\x12", prefix + _delimited(b"\x12", _delimited(b"\x0a", canonical(v))))
            for prefix, v in zip(fields, key, strict=True)
        )  # TableEntry.match: FieldMatch{field_id, exact{value}}
        action = action_id + b"".join(
            _delimited(b"\x22", prefix + _delimited(b"\x1a", canonical(params[name])))
            for name, prefix in param_ids
        )  # Action.params: Param{param_id, value}
        tail = _delimited(b"\x1a", _delimited(b"\x0a", action))  # TableEntry.action.action
        tail += b"\x48" + varint(TIMEOUT_NS)  # TableEntry.idle_timeout_ns
        entity = _delimited(b"\x12", table + match + tail)  # Entity.table_entry
        update = b"\x08" + varint(p4r.Update.INSERT) + _delimited(b"\x12", entity)
        out.append(_delimited(b"\x22", update))
    return b"".join(out)


def hand_merged(encoder: SessionEncoder, keys: list[tuple[int, int, int, int, int]]) -> bytes:
    request = p4r.WriteRequest(device_id=1)
    request.MergeFromString(_hand_updates(encoder, keys))
    return request.SerializeToString()


def hand_bytes(encoder: SessionEncoder, keys: list[tuple[int, int, int, int, int]]) -> bytes:
    return b"\x08\x01" + _hand_updates(encoder, keys)  # WriteRequest.device_id = 1, updates


def generated_copied(encoder: SessionEncoder, keys: list[tuple[int, int, int, int, int]]) -> bytes:
    params = _params(encoder)
    request = p4r.WriteRequest(device_id=1)
    request.updates.extend(
        update_of(p4r.Update.INSERT, encoder.entry(k, params, TIMEOUT_NS)) for k in keys
    )
    return request.SerializeToString()


def generated_in_place(
    encoder: SessionEncoder, keys: list[tuple[int, int, int, int, int]]
) -> bytes:
    params = _params(encoder)
    request = p4r.WriteRequest(device_id=1)
    encoder.fill(request, [SessionUpdate(p4r.Update.INSERT, k, params, TIMEOUT_NS) for k in keys])
    return request.SerializeToString()


Way = Callable[[SessionEncoder, list[tuple[int, int, int, int, int]]], bytes]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    encoder = _encoder()
    keys = _keys()
    ways: list[tuple[str, Way]] = [
        ("generated classes, filled in place (the controller)", generated_in_place),
        ("generated classes, entries copied in", generated_copied),
        ("hand-serialised, merged into the request", hand_merged),
        ("hand-serialised, bytes only", hand_bytes),
    ]
    outputs = {name: way(encoder, keys) for name, way in ways}
    if len(set(outputs.values())) != 1:
        print("the ways do not produce the same bytes: nothing to compare", file=sys.stderr)
        return 1
    times: dict[str, list[float]] = {name: [] for name, _ in ways}
    for _ in range(args.rounds):  # interleaved, so that load hits every way alike
        for name, way in ways:
            started = time.perf_counter()
            way(encoder, keys)
            times[name].append(time.perf_counter() - started)
    print(f"{ENTRIES:,} session entries into one serialised WriteRequest\n")
    print("| encoding | median ms per Write | entries/s | time vs the controller's |")
    print("|---|---:|---:|---:|")
    base = statistics.median(times[ways[0][0]])
    for name, _ in ways:
        median = statistics.median(times[name])
        print(f"| {name} | {median * 1e3:.1f} | {ENTRIES / median:,.0f} | {median / base:.2f}x |")
    print(
        f"\nOne WriteRequest of {len(outputs[ways[0][0]]):,} bytes, {args.rounds} interleaved "
        f"rounds, protobuf implementation `{api_implementation.Type()}`; the bytes are identical."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
