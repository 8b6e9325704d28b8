"""OpenGate's built-in software switch: runs p4c's BMv2 JSON with v1model semantics.

It is a target like BMv2's `simple_switch_grpc`: the program comes only from the JSON, and it is
controlled through the P4Runtime gRPC service. `python -m softswitch --help` shows the command line.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
