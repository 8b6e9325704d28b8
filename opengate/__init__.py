"""OpenGate: pieces shared by the controller, the SPM daemon, the software switch and tests."""

import os

# gRPC's core installs fork handlers unless told not to: in a forked child they restart its
# pollers, which then find their epoll descriptor closed when the child closes its descriptors
# before exec ("epoll_wait error: Bad file descriptor", and at times a child that never execs).
# Every process of this project that uses gRPC forks only to exec (subprocess, pexpect, Mininet),
# so the handlers are not needed. Set before anything imports grpc (opengate.p4info imports
# finsy, which imports it).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
