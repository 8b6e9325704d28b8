"""The switch as a whole: the current data plane, its ports, and where CPU-bound packets go."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

LOG = logging.getLogger(__name__)

# The native packet I/O thread's nice value. A frame's pass through the switch is a few
# microseconds, but on a machine whose cores are busy (the controller handling digests, the SPMs)
# a woken thread at the same priority may wait a scheduler slice (~1-3 ms) for a core: that was
# most of a new connection's p99 through the gateway (bench_sessions). It uses little CPU except
# under floods, where it is the switch's work.
IO_NICE = -10

Transmit = Callable[[int, bytes], None]
PacketInSink = Callable[[bytes], None]


class Switch:
    """Routes frames between ports, the data plane and the controller's packet I/O.

    With a native data plane (softswitch.native) the C side serves the Linux interfaces itself:
    the Python port layer is suspended while it does, and resumed for a Python one.
    """

    def __init__(self, device_id: int = 0, cpu_port: int | None = None) -> None:
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.dataplane: Any = None  # softswitch.engine.Dataplane or a NativeDataplane
        self.transmit: Transmit = self._no_transmit
        self.packet_in: PacketInSink | None = None
        self.ports: Any = None  # softswitch.ports.Ports, when interfaces are attached
        self.native_io = True  # let a native data plane serve the ports
        self.io_nice = IO_NICE  # the native packet I/O thread's nice value (0: the process's)
        self.lock = threading.Lock()
        self.rx_packets = 0
        self.tx_packets = 0

    @staticmethod
    def _no_transmit(port: int, frame: bytes) -> None:
        LOG.debug("no port layer: frame for port %d discarded", port)

    def set_dataplane(self, dataplane: Any) -> None:
        old = self.dataplane
        self.dataplane = dataplane
        if old is not None and old is not dataplane:
            old.close()
        ports = self.ports
        if ports is None or dataplane is None or not ports.interfaces:
            return
        if dataplane.native and self.native_io:
            ports.suspend()
            try:
                dataplane.open_ports(ports.interfaces, self.emit, self.io_nice)
                LOG.info("ports served by the native data plane")
                return
            except OSError as exc:
                LOG.warning("native packet I/O unavailable (%s): Python ports", exc)
        ports.resume()

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
        dp = self.dataplane
        if dp is not None and dp.owns_ports:
            dp.transmit(port, frame)
            return
        self.transmit(port, frame)
