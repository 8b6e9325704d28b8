"""Command line of the software switch, close to simple_switch_grpc's.

    python -m softswitch [-i 1@veth0 ...] [--no-p4 | program.json] [--log-console] [-L info]
                         [-- --grpc-server-addr 127.0.0.1:9559 --device-id 1 --cpu-port 255]

The target options after `--` may also be given before it. The gRPC port opens once the switch
is ready for SetForwardingPipelineConfig, and a line containing "ready" is written to stderr.
SIGTERM or SIGINT stops it cleanly.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from softswitch.errors import LoadError
from softswitch.native import ENGINES, make_dataplane
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.ports import Ports
from softswitch.program import load_program
from softswitch.switch import IO_NICE, Switch

LOG = logging.getLogger("softswitch")

LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "off": logging.CRITICAL + 10,
}


def _interface(text: str) -> tuple[int, str]:
    num, sep, name = text.partition("@")
    if not sep or not num.isdigit() or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PORT@INTERFACE, e.g. 1@veth0")
    return int(num), name


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m softswitch",
        description="OpenGate's software switch: runs a BMv2 JSON (v1model), P4Runtime over gRPC.",
    )
    p.add_argument("program", nargs="?", help="BMv2 JSON to run before any P4Runtime config")
    p.add_argument(
        "--no-p4", action="store_true", help="start without a program (wait for P4Runtime)"
    )
    p.add_argument(
        "-i",
        "--interface",
        action="append",
        type=_interface,
        default=[],
        metavar="PORT@IFACE",
        help="attach Linux interface IFACE as port PORT",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="native: the program compiled to C (refused if it cannot be); python: the Python "
        "engine; auto (default, or $SOFTSWITCH_ENGINE): native where it can be",
    )
    p.add_argument(
        "--python-io",
        action="store_true",
        help="keep packet I/O in Python even with the native engine",
    )
    p.add_argument(
        "--io-nice",
        type=int,
        default=IO_NICE,
        metavar="N",
        help=f"nice value of the native packet I/O thread (default {IO_NICE}, so that frames do "
        "not wait for a core behind the controller or the middleboxes; 0: the process's)",
    )
    p.add_argument("--log-console", action="store_true", help="log to stderr")
    p.add_argument("-L", "--log-level", default="info", choices=sorted(LEVELS))
    p.add_argument("--thrift-port", type=int, help="accepted for compatibility; ignored")
    p.add_argument("--grpc-server-addr", default="0.0.0.0:9559", help="P4Runtime listen address")
    p.add_argument("--device-id", type=int, default=0, help="P4Runtime device id")
    p.add_argument("--cpu-port", type=int, default=None, help="port number of the CPU (packet I/O)")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    if "--" in argv:
        i = argv.index("--")
        argv = argv[:i] + argv[i + 1 :]
    args = build_parser().parse_args(argv)
    if args.program and args.no_p4:
        build_parser().error("give either a program or --no-p4, not both")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    level = LEVELS[args.log_level] if args.log_console else logging.WARNING
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.log_console:  # which engine and which port layer: always worth a line
        for name in ("softswitch.native", "softswitch.switch"):
            logging.getLogger(name).setLevel(logging.INFO)
    if args.thrift_port is not None:
        LOG.info("--thrift-port %d ignored: this switch has no Thrift server", args.thrift_port)
    switch = Switch(device_id=args.device_id, cpu_port=args.cpu_port)
    switch.native_io = not args.python_io
    switch.io_nice = args.io_nice
    ports: Ports | None = None
    try:
        ports = Ports(dict(args.interface))
    except OSError as exc:
        print(f"softswitch: {exc}", file=sys.stderr)
        return 2
    switch.transmit = ports.transmit
    switch.ports = ports
    if args.program:
        try:
            program = load_program(json.loads(Path(args.program).read_text()))
            dataplane = make_dataplane(program, engine=args.engine)
        except (OSError, ValueError, LoadError) as exc:
            ports.close()
            print(f"softswitch: cannot load {args.program}: {exc}", file=sys.stderr)
            return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        del frame
        LOG.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: where it is
    try:
        server = P4RuntimeServer(switch, args.grpc_server_addr, engine=args.engine)
    except (OSError, RuntimeError) as exc:
        ports.close()
        print(f"softswitch: cannot serve gRPC on {args.grpc_server_addr}: {exc}", file=sys.stderr)
        return 2
    ports.start(switch.receive)
    if args.program:
        switch.set_dataplane(dataplane)
    server.start()
    port_list = ", ".join(f"{n}@{i}" for n, i in sorted(ports.interfaces.items())) or "none"
    LOG.info(
        "ready: P4Runtime on %s (device %d), ports %s",
        args.grpc_server_addr,
        args.device_id,
        port_list,
    )
    print(
        f"softswitch: ready: P4Runtime on {args.grpc_server_addr}, ports {port_list}",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.stop()
        switch.set_dataplane(None)
        ports.close()
        LOG.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
