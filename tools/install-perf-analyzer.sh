#!/usr/bin/env bash
# Unpacks NVIDIA's perf_analyzer into .tools/perf_analyzer/ (git-ignored) for the tests that drive
# `sonic serve` with it. The binary is the one inside the tritonclient 2.51.0 wheel (newer perf-analyzer
# wheels need a newer glibc); it needs libb64.so.0d, from Debian's libb64-0d (`apt-get download` +
# `dpkg -x`: nothing is installed system-wide), and libcudart.so.12, from the nvidia-cuda-runtime-cu12
# wheel in the test dependency group. Prints the binary's path. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.tools/perf_analyzer"
binary="$dest/bin/perf_analyzer"
python="${SONIC_PYTHON_BIN:-$root/.venv/bin/python}"
if [[ ! -x "$binary" || ! -f "$dest/lib/libb64.so.0d" ]]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  chmod 755 "$work"  # apt's sandbox user writes the .deb here
  "$python" -m pip download -q --no-deps --dest "$work" "tritonclient==2.51.0" >&2
  (cd "$work" && apt-get download libb64-0d >&2)
  rm -rf "$dest"
  mkdir -p "$dest/bin" "$dest/lib"
  (cd "$work" && python3 -m zipfile -e tritonclient-2.51.0-*.whl wheel >/dev/null)
  cp "$work/wheel/tritonclient-2.51.0.data/data/bin/perf_analyzer" "$binary"
  chmod 755 "$binary"
  dpkg -x "$work"/libb64-0d_*.deb "$work/libb64"
  cp "$work"/libb64/usr/lib/x86_64-linux-gnu/libb64.so.0d* "$dest/lib/"
fi
echo "$binary"
