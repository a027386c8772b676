#!/usr/bin/env bash
# Unpacks Debian's `prometheus` package into .tools/prometheus/ (git-ignored): the binary that
# `sonic deploy local --prometheus` and the deployment tests run. `apt-get download` + `dpkg -x`:
# no system service is installed or started, and nothing outside the repository changes.
# Prints the binary's path. Idempotent: does nothing when the binary is already there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.tools/prometheus"
binary="$dest/usr/bin/prometheus"
if [[ ! -x "$binary" ]]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # apt's sandbox user cannot write into a root-owned mktemp folder; the download itself is unchanged.
  chmod 755 "$work"
  (cd "$work" && apt-get download prometheus >&2)
  rm -rf "$dest"
  mkdir -p "$dest"
  dpkg -x "$work"/prometheus_*.deb "$dest"
fi
echo "$binary"
