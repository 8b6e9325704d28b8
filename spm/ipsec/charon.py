"""One strongSwan charon, run by the SPM: its own configuration, VICI socket and log file.

ESP is done by the Linux kernel (XFRM) where the kernel has it (CONFIG_INET_ESP and the AEAD
ciphers); where it does not (some VM kernels, without modules to load), by strongSwan's libipsec
in charon itself (the kernel-libipsec plugin, Debian's libcharon-extra-plugins): a TUN device per
charon, routes into it that charon installs (table 220), ESP in UDP on port 4500 (libipsec in
strongSwan 5.9 always encapsulates). `esp_mode("auto")` probes the kernel and says which it chose.

charon-systemd is used (Debian's charon-systemd package): unlike /usr/lib/ipsec/charon it writes
no global pid file, so several can run on one machine, each in its own network namespace (a
Mininet host), told apart only by STRONGSWAN_CONF. Nothing is read from /etc/strongswan.conf or
/etc/swanctl: the configuration file names the plugins it loads, and connections and secrets come
later over VICI. The daemon is ready when its VICI socket answers `version`; it is stopped by its
PID (SIGTERM, then SIGKILL after a grace period), never by name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import vici

LOG = logging.getLogger(__name__)

CHARON_BINARIES = ("charon-systemd",)
CHARON_DIRS = ("/usr/sbin", "/usr/lib/ipsec")
PLUGINS = (
    "random nonce openssl aes sha1 sha2 hmac kdf gcm pem pkcs1 pkcs8 x509 pubkey constraints "
    "revocation kernel-netlink socket-default vici"
)
ESP_MODES = ("auto", "kernel", "userspace")
LIBIPSEC_PLUGIN = "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"


class CharonError(Exception):
    """charon could not be started, or stopped answering."""


def find_charon() -> str | None:
    """The path of charon-systemd, or None when strongSwan's charon-systemd is not installed."""
    for name in CHARON_BINARIES:
        found = shutil.which(name)
        if found:
            return found
        for folder in CHARON_DIRS:
            candidate = Path(folder) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def kernel_has_esp(prefix: Sequence[str] = ()) -> tuple[bool, str]:
    """Whether the kernel (of the namespace `prefix` runs in) takes an AES-GCM ESP state: adds
    one with a reserved address pair and deletes it again. Returns (yes, why not)."""
    spi = "0x4f470001"
    state = ["src", "192.0.2.254", "dst", "192.0.2.253", "proto", "esp", "spi", spi]
    add = [*prefix, "ip", "xfrm", "state", "add", *state, "mode", "tunnel", "aead"]
    add += ["rfc4106(gcm(aes))", "0x" + "11" * 20, "128"]
    try:
        result = subprocess.run(add, check=False, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"cannot run ip xfrm: {error}"
    if result.returncode != 0:
        return False, (result.stderr.strip() or "ip xfrm state add failed")
    delete = [*prefix, "ip", "xfrm", "state", "delete", *state[:4], "proto", "esp", "spi", spi]
    subprocess.run(delete, capture_output=True, timeout=10, check=False)
    return True, ""


def esp_mode(requested: str, prefix: Sequence[str] = ()) -> tuple[str, str]:
    """`kernel` or `userspace` for a requested mode (auto, kernel, userspace), and why."""
    if requested not in ESP_MODES:
        raise ValueError(f"esp mode {requested!r} is not one of {', '.join(ESP_MODES)}")
    if requested != "auto":
        return requested, "as configured"
    ok, why = kernel_has_esp(prefix)
    if ok:
        return "kernel", "the kernel does ESP with AES-GCM (XFRM)"
    if not Path(LIBIPSEC_PLUGIN).exists():
        return "kernel", f"the kernel lacks ESP ({why}) and kernel-libipsec is not installed"
    return "userspace", f"the kernel lacks ESP ({why}): strongSwan's libipsec does ESP"


def strongswan_conf(run_dir: Path, log_level: int = 1, esp: str = "kernel") -> str:
    """The strongswan.conf of one instance (charon-systemd's section)."""
    plugins = PLUGINS
    if esp == "userspace":  # before kernel-netlink, whose IPsec interface it then replaces
        plugins = plugins.replace("kernel-netlink", "kernel-libipsec kernel-netlink")
    # libipsec delivers through its TUN device, reached by the routes charon installs.
    routes = "yes" if esp == "userspace" else "no"
    return f"""# written by the OpenGate IPsec SPM; connections and secrets are loaded over VICI
charon-systemd {{
  load = {plugins}
  install_routes = {routes}
  install_virtual_ip = no
  retransmit_tries = 4
  retransmit_timeout = 2.0
  retransmit_base = 1.4
  make_before_break = yes
  plugins {{
    vici {{
      socket = unix://{run_dir / "charon.vici"}
    }}
  }}
  journal {{
    default = -1
  }}
  filelog {{
    opengate {{
      path = {run_dir / "charon.log"}
      time_format = %Y-%m-%d %H:%M:%S
      ike_name = yes
      append = yes
      flush_line = yes
      default = {log_level}
      ike = 2
      cfg = 2
      knl = 1
    }}
  }}
}}
"""


class Charon:
    """One charon-systemd process; `prefix` runs it elsewhere (e.g. `ip netns exec NS`)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        binary: str | None = None,
        prefix: Sequence[str] = (),
        log_level: int = 1,
        ready_timeout: float = 15.0,
        esp: str = "auto",
    ) -> None:
        self.run_dir = Path(run_dir)
        self.esp_requested = esp
        self.esp = "kernel"  # decided at start
        self.esp_reason = ""
        self.binary = binary or find_charon()
        self.prefix = tuple(prefix)
        self.log_level = log_level
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def conf_path(self) -> Path:
        return self.run_dir / "strongswan.conf"

    @property
    def socket_path(self) -> Path:
        return self.run_dir / "charon.vici"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "charon.log"

    @property
    def pid_path(self) -> Path:
        return self.run_dir / "charon.pid"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        if self.binary is None:
            raise CharonError(
                "strongSwan's charon-systemd is not installed (Debian charon-systemd)"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.esp, self.esp_reason = esp_mode(self.esp_requested, self.prefix)
        LOG.info("charon: ESP in %s: %s", self.esp, self.esp_reason)
        self.conf_path.write_text(strongswan_conf(self.run_dir, self.log_level, self.esp))
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        env = dict(os.environ, STRONGSWAN_CONF=str(self.conf_path))
        out = (self.run_dir / "charon.out").open("ab")
        try:
            self.process = subprocess.Popen(
                [*self.prefix, self.binary],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()
        self.pid_path.write_text(f"{self.process.pid}\n")
        LOG.info("charon: started pid %d in %s", self.process.pid, self.run_dir)
        try:
            self._wait_ready()
        except CharonError:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = "no VICI socket yet"
        while time.monotonic() < deadline:
            if not self.running():
                code = self.process.returncode if self.process else None
                raise CharonError(f"charon exited with status {code}: {self.log_tail()}")
            if self.socket_path.exists():
                try:
                    with self.session() as session:
                        session.version()
                    return
                except OSError as error:
                    last = str(error)
            time.sleep(0.05)
        raise CharonError(
            f"charon's VICI socket {self.socket_path} did not answer within "
            f"{self.ready_timeout:.0f} s ({last}): {self.log_tail()}"
        )

    @contextlib.contextmanager
    def session(self, timeout: float | None = 30.0) -> Any:
        """A VICI session on a new connection (closed on exit)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.socket_path))
            yield vici.Session(sock)
        finally:
            sock.close()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        with contextlib.suppress(OSError):
            text += (self.run_dir / "charon.out").read_text(errors="replace")
        tail = [line for line in text.splitlines() if line.strip()][-lines:]
        return " | ".join(tail) if tail else "(no log)"

    def stop(self, grace: float = 5.0) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                LOG.warning("charon: pid %d ignored SIGTERM; killing it", process.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=grace)
        LOG.info("charon: pid %d stopped (status %s)", process.pid, process.returncode)
        self.process = None
        for path in (self.socket_path, self.pid_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def __enter__(self) -> Charon:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
