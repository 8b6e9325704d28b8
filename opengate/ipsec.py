"""IPsec site-to-site tunnels: the policy's `ipsec` section, validated, and what charon is told.

Shared by the CPM (which validates the policy and hands tunnels to the IPsec SPMs) and the IPsec
SPM (`spm/ipsec`, which loads them into its charon over VICI). The format, in the policy file:

    ipsec:
      pool: vpn                       # the SPM pool whose SPMs run charon (spm_pools)
      address: 198.51.100.2           # the gateway's IKE/ESP address, on an outside subnet
      tunnels:
        - name: site-b
          local_subnets: [inside]     # network names or prefixes (the SPD's inside selectors)
          remote_subnets: [10.0.2.0/24]
          peer: 198.51.100.3          # the remote gateway's IKE address
          ike_version: 2              # only IKEv2
          auth: {psk: "a long shared secret"}       # or psk_file: FILE,
          # or {certificate: FILE, private_key: FILE, ca: FILE, remote_id: "CN=..."}
          proposals:
            ike: {encryption: [aes-gcm-256], prf: [sha384], dh: [x25519]}
            esp: {encryption: [aes-gcm-128], dh: [x25519]}   # dh: PFS on rekeys
          lifetimes: {ike: 4h, child: 1h}           # rekey after; seconds or 30s/15m/4h
          dpd: 10s                    # dead peer detection interval (0: off)
          start: true                 # bring the tunnel up at once (else on traffic)

Algorithm names are the project's (aes-gcm-128, x25519), mapped here to strongSwan's keywords
(aes128gcm16, curve25519); an unknown name is an error at its line. AEAD ciphers (GCM, ChaCha20)
take no `integrity`; CBC ciphers need one. IKE needs a PRF (default sha256).

`vici_connection` and `vici_secret` turn a tunnel into the VICI `load-conn` / `load-shared`
messages (plain dicts; the SPM encodes them). Nothing here opens a socket.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opengate.yamlconf import Reader, as_bool, as_int, as_ipv4, as_str

ENCRYPTION = {
    "aes-gcm-128": "aes128gcm16",
    "aes-gcm-256": "aes256gcm16",
    "chacha20-poly1305": "chacha20poly1305",
    "aes-cbc-128": "aes128",
    "aes-cbc-256": "aes256",
}
AEAD = frozenset({"aes-gcm-128", "aes-gcm-256", "chacha20-poly1305"})
INTEGRITY = {"sha256": "sha256", "sha384": "sha384", "sha512": "sha512"}
PRF = {"sha256": "prfsha256", "sha384": "prfsha384", "sha512": "prfsha512"}
DH = {
    "x25519": "curve25519",
    "x448": "curve448",
    "ecp256": "ecp256",
    "ecp384": "ecp384",
    "modp2048": "modp2048",
    "modp3072": "modp3072",
}
MIN_PSK_LENGTH = 8
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_DURATION_RE = re.compile(r"^(\d+)\s*([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Proposal:
    """One IKE or ESP proposal; `keywords` gives strongSwan's spelling."""

    encryption: tuple[str, ...]
    integrity: tuple[str, ...] = ()
    prf: tuple[str, ...] = ()
    dh: tuple[str, ...] = ()

    def keywords(self) -> str:
        parts = [ENCRYPTION[e] for e in self.encryption]
        parts += [INTEGRITY[i] for i in self.integrity]
        parts += [PRF[p] for p in self.prf]
        parts += [DH[d] for d in self.dh]
        return "-".join(parts)

    def describe(self) -> str:
        parts = list(self.encryption) + list(self.integrity)
        parts += [f"prf-{p}" for p in self.prf] + list(self.dh)
        return "/".join(parts)


@dataclass(frozen=True, slots=True)
class PskAuth:
    secret: str = ""

    def __repr__(self) -> str:  # never print the secret
        return "PskAuth(<secret>)"


@dataclass(frozen=True, slots=True)
class CertAuth:
    certificate: str  # PEM paths, absolute
    private_key: str
    ca: str
    local_id: str | None
    remote_id: str | None


@dataclass(frozen=True, slots=True)
class TunnelSpec:
    name: str
    local_subnets: tuple[ipaddress.IPv4Network, ...]
    remote_subnets: tuple[ipaddress.IPv4Network, ...]
    peer: ipaddress.IPv4Address
    auth: PskAuth | CertAuth
    ike: Proposal
    esp: Proposal
    ike_lifetime: int  # seconds until the IKE SA is rekeyed
    child_lifetime: int  # seconds until the CHILD SA is rekeyed
    dpd: int  # seconds; 0 = off
    start: bool
    line: int

    @property
    def auth_kind(self) -> str:
        return "psk" if isinstance(self.auth, PskAuth) else "certificate"

    def summary(self) -> dict[str, Any]:
        """What the API and CLI show of the configuration (never the secret)."""
        return {
            "name": self.name,
            "peer": str(self.peer),
            "local_subnets": [str(n) for n in self.local_subnets],
            "remote_subnets": [str(n) for n in self.remote_subnets],
            "auth": self.auth_kind,
            "ike_proposal": self.ike.keywords(),
            "esp_proposal": self.esp.keywords(),
            "ike_lifetime": self.ike_lifetime,
            "child_lifetime": self.child_lifetime,
        }


@dataclass(frozen=True, slots=True)
class IpsecSpec:
    pool: str
    address: ipaddress.IPv4Address
    tunnels: tuple[TunnelSpec, ...]

    def tunnel(self, name: str) -> TunnelSpec | None:
        return next((t for t in self.tunnels if t.name == name), None)


# -- parsing -----------------------------------------------------------------------------------


def duration(value: Any) -> int:
    """Seconds: an integer, or a string such as 30s, 15m, 4h, 1d."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration (30s, 15m, 4h), got {value!r}")
    if isinstance(value, int):
        seconds = value
    else:
        match = _DURATION_RE.match(str(value).strip())
        if match is None:
            raise ValueError(f"expected a duration (30s, 15m, 4h), got {value!r}")
        seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative, got {value!r}")
    return seconds


def _names(table: dict[str, str], what: str) -> Callable[[Any], tuple[str, ...]]:
    def convert(value: Any) -> tuple[str, ...]:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise ValueError(f"at least one {what} is needed")
        out: list[str] = []
        for item in items:
            if item not in table:
                raise ValueError(f"unknown {what} {item!r} (known: {', '.join(table)})")
            if item not in out:
                out.append(str(item))
        return tuple(out)

    return convert


def _proposal(reader: Reader, kind: str) -> Proposal:
    encryption = reader.get("encryption", _names(ENCRYPTION, "encryption"))
    aead = [e for e in encryption if e in AEAD]
    if aead and len(aead) != len(encryption):
        raise reader.error(
            "encryption", "AEAD (gcm, chacha20-poly1305) and CBC ciphers go in separate tunnels"
        )
    integrity: tuple[str, ...] = ()
    if reader.has("integrity"):
        integrity = reader.get("integrity", _names(INTEGRITY, "integrity algorithm"))
        if aead:
            raise reader.error(
                "integrity", f"{aead[0]} is an AEAD cipher: it takes no integrity algorithm"
            )
    elif not aead:
        raise reader.error("integrity", f"{encryption[0]} needs an integrity algorithm")
    prf: tuple[str, ...] = ()
    if kind == "ike":
        prf = reader.get("prf", _names(PRF, "PRF"), ("sha256",))
        dh = reader.get("dh", _names(DH, "DH group"))
    else:
        dh = reader.get("dh", _names(DH, "DH group"), ())
    reader.reject_unknown()
    return Proposal(encryption, integrity, prf, dh)


DEFAULT_IKE = Proposal(("aes-gcm-256",), (), ("sha384",), ("x25519",))
DEFAULT_ESP = Proposal(("aes-gcm-128",), (), (), ("x25519",))


def parse_ipsec(
    reader: Reader,
    prefixes: Callable[[Any], tuple[ipaddress.IPv4Network, ...] | None],
    read_file: Callable[[Reader, str], Path],
    pools: Sequence[str],
    outside: Sequence[ipaddress.IPv4Interface],
    inside: Sequence[ipaddress.IPv4Network],
) -> IpsecSpec:
    """The `ipsec` section. `prefixes` resolves network names; `read_file` reads a file a field
    names (relative to the policy) and returns its path; `pools` are the SPM pools' names;
    `outside`/`inside` are the outside ports' addresses and the inside ports' subnets."""
    pool = reader.get("pool", as_str)
    if pool not in pools:
        raise reader.error("pool", f"no SPM pool named {pool!r} (spm_pools)")
    address = reader.get("address", as_ipv4)
    if not any(address in iface.network for iface in outside):
        nets = ", ".join(str(i.network) for i in outside) or "none"
        raise reader.error(
            "address", f"{address} is on no outside port's subnet (outside subnets: {nets})"
        )
    tunnels: list[TunnelSpec] = []
    for item in reader.items("tunnels"):
        tunnel = _tunnel(item, prefixes, read_file)
        _check_against(item, tunnel, tunnels, address, inside)
        tunnels.append(tunnel)
    if not tunnels:
        raise reader.error("tunnels", "no tunnels: leave the ipsec section out instead")
    reader.reject_unknown()
    return IpsecSpec(pool, address, tuple(tunnels))


def _subnets(
    item: Reader, key: str, prefixes: Callable[[Any], tuple[ipaddress.IPv4Network, ...] | None]
) -> tuple[ipaddress.IPv4Network, ...]:
    nets = item.get(key, prefixes)
    if nets is None or any(n.prefixlen == 0 for n in nets):
        raise item.error(key, "a tunnel's subnets must be given ('any' and 0.0.0.0/0 are not)")
    return nets


def _tunnel(
    item: Reader,
    prefixes: Callable[[Any], tuple[ipaddress.IPv4Network, ...] | None],
    read_file: Callable[[Reader, str], Path],
) -> TunnelSpec:
    name = item.get("name", as_str)
    if not NAME_RE.match(name):
        raise item.error("name", f"{name!r}: a letter, then letters, digits, - or _ (32 at most)")
    local = _subnets(item, "local_subnets", prefixes)
    remote = _subnets(item, "remote_subnets", prefixes)
    for net in remote:
        clash = next((n for n in local if n.overlaps(net)), None)
        if clash is not None:
            raise item.error("remote_subnets", f"{net} overlaps local subnet {clash}")
    peer = item.get("peer", as_ipv4)
    if any(peer in net for net in remote):
        raise item.error("peer", f"{peer} is inside the tunnel's remote subnets")
    version = item.get("ike_version", as_int, 2)
    if version != 2:
        raise item.error("ike_version", f"IKEv{version} is not supported; only IKEv2")
    auth = _auth(item.sub("auth"), read_file)
    ike, esp = DEFAULT_IKE, DEFAULT_ESP
    if item.has("proposals"):
        section = item.sub("proposals")
        if section.has("ike"):
            ike = _proposal(section.sub("ike"), "ike")
        if section.has("esp"):
            esp = _proposal(section.sub("esp"), "esp")
        section.reject_unknown()
    ike_life, child_life = 4 * 3600, 3600
    if item.has("lifetimes"):
        section = item.sub("lifetimes")
        ike_life = section.get("ike", duration, ike_life)
        child_life = section.get("child", duration, child_life)
        for key, value in (("ike", ike_life), ("child", child_life)):
            if value < 10:
                raise section.error(key, f"{value} s is too short a lifetime (10 s at least)")
        section.reject_unknown()
    dpd = item.get("dpd", duration, 10)
    start = item.get("start", as_bool, True)
    item.reject_unknown()
    return TunnelSpec(
        name, local, remote, peer, auth, ike, esp, ike_life, child_life, dpd, start, item.line
    )


def _auth(reader: Reader, read_file: Callable[[Reader, str], Path]) -> PskAuth | CertAuth:
    kinds = [k for k in ("psk", "psk_file", "certificate") if reader.has(k)]
    if len(kinds) != 1:
        raise reader.error(
            kinds[1] if len(kinds) > 1 else "psk",
            "give exactly one of psk, psk_file or certificate"
            + (f" (found {', '.join(kinds)})" if kinds else ""),
        )
    if kinds[0] in ("psk", "psk_file"):
        if kinds[0] == "psk":
            secret = reader.get("psk", as_str)
        else:
            secret = read_file(reader, "psk_file").read_text().strip()
        if len(secret) < MIN_PSK_LENGTH:
            raise reader.error(kinds[0], f"a pre-shared key needs {MIN_PSK_LENGTH} characters")
        reader.reject_unknown()
        return PskAuth(secret)
    certificate = str(read_file(reader, "certificate"))
    private_key = str(read_file(reader, "private_key"))
    ca = str(read_file(reader, "ca"))
    local_id = reader.get("local_id", as_str, required=False)
    remote_id = reader.get("remote_id", as_str, required=False)
    reader.reject_unknown()
    return CertAuth(certificate, private_key, ca, local_id, remote_id)


def _check_against(
    item: Reader,
    tunnel: TunnelSpec,
    earlier: Sequence[TunnelSpec],
    address: ipaddress.IPv4Address,
    inside: Sequence[ipaddress.IPv4Network],
) -> None:
    if tunnel.peer == address:
        raise item.error("peer", f"{address} is the gateway's own IPsec address")
    for net in tunnel.remote_subnets:
        clash = next((n for n in inside if n.overlaps(net)), None)
        if clash is not None:
            raise item.error("remote_subnets", f"{net} overlaps the inside subnet {clash}")
    for other in earlier:
        if other.name == tunnel.name:
            raise item.error("name", f"tunnel {tunnel.name!r} is defined twice")
        if other.peer == tunnel.peer:
            raise item.error("peer", f"{tunnel.peer} is already the peer of {other.name!r}")
        for net in tunnel.remote_subnets:
            clash = next((n for n in other.remote_subnets if n.overlaps(net)), None)
            if clash is not None:
                raise item.error(
                    "remote_subnets", f"{net} overlaps {clash} of tunnel {other.name!r}"
                )


def tunnels_from_yaml(data: Any, path: str, where: str = "tunnels") -> tuple[TunnelSpec, ...]:
    """Tunnels from a list in a plain file (the IPsec SPM's own configuration, tests): prefixes
    only (no network names), files relative to `path`'s folder."""
    base = Path(path).parent

    def prefixes(value: Any) -> tuple[ipaddress.IPv4Network, ...] | None:
        items = value if isinstance(value, list) else [value]
        try:
            return tuple(ipaddress.IPv4Network(as_str(i), strict=False) for i in items)
        except ValueError:
            raise ValueError(f"expected IPv4 prefixes, got {value!r}") from None

    def read_file(reader: Reader, key: str) -> Path:
        target = Path(reader.get(key, as_str))
        target = target if target.is_absolute() else base / target
        if not target.is_file():
            raise reader.error(key, f"cannot read {target}")
        return target

    reader = Reader(path, {where: data})
    out: list[TunnelSpec] = []
    for item in reader.items(where):
        tunnel = _tunnel(item, prefixes, read_file)
        if any(t.name == tunnel.name for t in out):
            raise item.error("name", f"tunnel {tunnel.name!r} is defined twice")
        out.append(tunnel)
    return tuple(out)


# -- what charon is told (VICI messages as dicts) ----------------------------------------------


def vici_connection(tunnel: TunnelSpec, local_address: ipaddress.IPv4Address) -> dict[str, Any]:
    """The `load-conn` message for a tunnel (swanctl.conf's connections.<name> as a dict)."""
    if isinstance(tunnel.auth, PskAuth):
        local_auth: dict[str, Any] = {"auth": "psk", "id": str(local_address)}
        remote_auth: dict[str, Any] = {"auth": "psk", "id": str(tunnel.peer)}
    else:
        # VICI takes the certificates themselves (PEM), not paths: the SPM may not have the files.
        local_auth = {"auth": "pubkey", "certs": [Path(tunnel.auth.certificate).read_text()]}
        if tunnel.auth.local_id:
            local_auth["id"] = tunnel.auth.local_id
        remote_auth = {"auth": "pubkey", "cacerts": [Path(tunnel.auth.ca).read_text()]}
        if tunnel.auth.remote_id:
            remote_auth["id"] = tunnel.auth.remote_id
    child: dict[str, Any] = {
        "local_ts": [str(n) for n in tunnel.local_subnets],
        "remote_ts": [str(n) for n in tunnel.remote_subnets],
        "esp_proposals": [tunnel.esp.keywords()],
        "mode": "tunnel",
        "rekey_time": str(tunnel.child_lifetime),
        "life_time": str(tunnel.child_lifetime + max(tunnel.child_lifetime // 10, 5)),
        "start_action": "start" if tunnel.start else "trap",
        "dpd_action": "restart",
        "close_action": "start" if tunnel.start else "trap",
    }
    return {
        tunnel.name: {
            "version": "2",
            "local_addrs": [str(local_address)],
            "remote_addrs": [str(tunnel.peer)],
            "proposals": [tunnel.ike.keywords()],
            "rekey_time": str(tunnel.ike_lifetime),
            "dpd_delay": str(tunnel.dpd),
            "encap": "no",
            "mobike": "no",
            "unique": "replace",
            "local-1": local_auth,
            "remote-1": remote_auth,
            "children": {tunnel.name: child},
        }
    }


def vici_key(tunnel: TunnelSpec) -> dict[str, Any] | None:
    """The `load-key` message of a certificate tunnel's private key (None for a PSK)."""
    if not isinstance(tunnel.auth, CertAuth):
        return None
    return {"type": "any", "data": Path(tunnel.auth.private_key).read_text()}


def vici_secret(tunnel: TunnelSpec, local_address: ipaddress.IPv4Address) -> dict[str, Any] | None:
    """The `load-shared` message for a PSK tunnel (None for certificates)."""
    if not isinstance(tunnel.auth, PskAuth):
        return None
    return {
        "id": f"psk-{tunnel.name}",
        "type": "IKE",
        "data": tunnel.auth.secret,
        "owners": [str(local_address), str(tunnel.peer)],
    }
