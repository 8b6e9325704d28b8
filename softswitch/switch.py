"""The switch as a whole: the current data plane, its ports, and where CPU-bound packets go."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from softswitch.engine import Dataplane

LOG = logging.getLogger(__name__)

Transmit = Callable[[int, bytes], None]
PacketInSink = Callable[[bytes], None]


class Switch:
    """Routes frames between ports, the data plane and the controller's packet I/O."""

    def __init__(self, device_id: int = 0, cpu_port: int | None = None) -> None:
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.dataplane: Dataplane | None = None
        self.transmit: Transmit = self._no_transmit
        self.packet_in: PacketInSink | None = None
        self.lock = threading.Lock()
        self.rx_packets = 0
        self.tx_packets = 0

    @staticmethod
    def _no_transmit(port: int, frame: bytes) -> None:
        LOG.debug("no port layer: frame for port %d discarded", port)

    def set_dataplane(self, dataplane: Dataplane | None) -> None:
        self.dataplane = dataplane

    def receive(self, port: int, frame: bytes) -> None:
        """A frame arrived on `port` (or from the controller on the CPU port)."""
        dp = self.dataplane
        if dp is None:
            return
        self.rx_packets += 1
        for out_port, out_frame in dp.process(port, frame):
            self.emit(out_port, out_frame)

    def emit(self, port: int, frame: bytes) -> None:
        if port == self.cpu_port and self.packet_in is not None:
            self.packet_in(frame)
            return
        self.tx_packets += 1
        self.transmit(port, frame)
