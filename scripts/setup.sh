#!/usr/bin/env bash
# Idempotent set-up for a Debian 12 machine: Debian packages, the virtualenv with the locked Python
# dependencies, and a report of the optional P4 tools (p4c, BMv2) that the registries do not have.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
P4_PREFIX=${P4_PREFIX:-/opt/p4}
DEBIAN_PACKAGES=(
  python3 python3-venv python3-dev build-essential git clang libclang-rt-14-dev
  mininet iproute2 iputils-ping ethtool procps psmisc
  nftables iptables libnetfilter-queue-dev
  iperf3 curl netcat-openbsd tcpdump
  clamav clamav-daemon clamav-testfiles
  postgresql
  chromium chromium-driver
  charon-systemd strongswan-swanctl libstrongswan-standard-plugins libcharon-extra-plugins
)

log() { printf 'setup: %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -q
  as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
  # Packaged daemons must not run on their own: the project starts clamd and PostgreSQL itself.
  for unit in clamav-daemon clamav-freshclam postgresql strongswan; do
    as_root systemctl disable --now "$unit" >/dev/null 2>&1 || true
  done
else
  log "Debian packages: all present"
fi

lock_sum=$(sha256sum requirements.lock pyproject.toml | sha256sum | cut -c1-16)
stamp="$VENV/.installed-$lock_sum"
if [ ! -f "$stamp" ]; then
  log "creating the virtualenv $VENV from requirements.lock"
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r requirements.lock
  rm -f "$VENV"/.installed-*
  touch "$stamp"
else
  log "virtualenv $VENV: up to date with requirements.lock"
fi

site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The project itself runs from this checkout: put it on the venv's path and give it its command.
echo "$PWD" > "$site/opengate-checkout.pth"
cat > "$VENV/bin/opengate" <<SCRIPT
#!$PWD/$VENV/bin/python
from opengate.cli import main
raise SystemExit(main())
SCRIPT
chmod +x "$VENV/bin/opengate"

# Mininet comes from Debian (with its mnexec helper); make its Python package visible in the venv.
if [ -d /usr/lib/python3/dist-packages/mininet ] && [ ! -e "$site/mininet" ]; then
  ln -s /usr/lib/python3/dist-packages/mininet "$site/mininet"
fi

PATH="$P4_PREFIX/bin:$PATH"
for tool in p4c-bm2-ss simple_switch_grpc; do
  if command -v "$tool" >/dev/null 2>&1; then
    log "found $tool: $(command -v "$tool")"
  else
    log "not found: $tool (optional; see docs/howto/bmv2.md)"
  fi
done
printf 'setup: '; "$VENV/bin/python" -m opengate.target
