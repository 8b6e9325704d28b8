"""Stateful objects of a program: counters, meters, registers, parser value sets."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

GREEN, YELLOW, RED = 0, 1, 2


@dataclass(slots=True)
class CounterArray:
    """Counters count packets and bytes (BMv2 always counts both); cells are [packets, bytes]."""

    name: str
    id: int
    size: int
    is_direct: bool
    binding: str | None
    cells: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.is_direct:
            self.cells = [[0, 0] for _ in range(self.size)]

    def reset(self) -> None:
        for cell in self.cells:
            cell[0] = cell[1] = 0


class Meter:
    """A two-rate three-colour marker (RFC 2698, colour-blind) as BMv2 executes it.

    Rates are per second; tokens accumulate from one time origin, so no rounding error builds up.
    An unconfigured meter marks everything green.
    """

    __slots__ = ("_lock", "_origin", "configured", "packets", "rates", "tokens", "tokens_last")

    def __init__(self, packets: bool) -> None:
        self.packets = packets
        self.configured = False
        self.rates: list[tuple[float, int, int]] = []  # (rate per second, burst, colour)
        self.tokens: list[int] = []
        self.tokens_last: list[int] = []
        self._origin = 0
        self._lock = threading.Lock()

    def configure(self, cir: int, cburst: int, pir: int, pburst: int) -> None:
        """Set the committed and peak rates (units per second) and bursts (units)."""
        with self._lock:
            # The peak bucket is checked first (red), then the committed one (yellow).
            self.rates = [(float(pir), pburst, RED), (float(cir), cburst, YELLOW)]
            self.tokens = [pburst, cburst]
            self.tokens_last = [0, 0]
            self._origin = time.monotonic_ns()
            self.configured = True

    def clear(self) -> None:
        with self._lock:
            self.configured = False
            self.rates = []

    def config(self) -> tuple[int, int, int, int] | None:
        if not self.configured:
            return None
        (pir, pburst, _), (cir, cburst, _) = self.rates
        return int(cir), cburst, int(pir), pburst

    def execute(self, nbytes: int) -> int:
        if not self.configured:
            return GREEN
        amount = 1 if self.packets else nbytes
        elapsed = time.monotonic_ns() - self._origin
        color = GREEN
        with self._lock:
            for i, (rate, burst, rate_color) in enumerate(self.rates):
                since = int(elapsed * rate / 1e9)
                new = since - self.tokens_last[i]
                self.tokens_last[i] = since
                tokens = min(self.tokens[i] + new, burst)
                if tokens < amount:
                    self.tokens[i] = tokens
                    color = rate_color
                    break
                self.tokens[i] = tokens - amount
        return color


@dataclass(slots=True)
class MeterArray:
    name: str
    id: int
    size: int
    is_direct: bool
    packets: bool
    binding: str | None
    result_slot: int  # PHV slot of the colour of a direct meter, -1 otherwise
    meters: list[Meter] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.is_direct:
            self.meters = [Meter(self.packets) for _ in range(self.size)]

    def execute(self, index: int, nbytes: int) -> int:
        if 0 <= index < self.size:
            return self.meters[index].execute(nbytes)
        return GREEN


@dataclass(slots=True)
class RegisterArray:
    name: str
    id: int
    size: int
    bitwidth: int
    cells: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cells = [0] * self.size

    def read(self, index: int) -> int:
        return self.cells[index] if 0 <= index < self.size else 0

    def write(self, index: int, value: int) -> None:
        if 0 <= index < self.size:
            self.cells[index] = value & ((1 << self.bitwidth) - 1)


@dataclass(slots=True)
class ValueSet:
    """A parser value set; members are (value, mask) over the transition key's padded bytes."""

    name: str
    id: int
    bitwidth: int
    max_size: int
    members: list[tuple[int, int]] = field(default_factory=list)

    def match(self, key: int, mask: int) -> bool:
        for value, vmask in self.members:
            m = mask & vmask
            if (key & m) == (value & m):
                return True
        return False
