#!/usr/bin/env bash
# Test tools that are not on PyPI, unpacked into .tools/ (git-ignored) without root: Debian's
# nghttp2-client (h2load, nghttp: an independent HTTP/2 peer for the conformance tests) and the
# libraries it needs that a slim image lacks. `./dev test` runs this; tests that need the tools
# run it too when they are missing, and skip with its output only if it fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=.tools/nghttp2
stamp="$root/.installed"
[[ -f "$stamp" ]] && exit 0
command -v apt-get >/dev/null || { echo "install-test-deps: apt-get not found (not Debian/Ubuntu)" >&2; exit 1; }
packages=(nghttp2-client libnghttp2-14 libev4 libjemalloc2 libjansson4)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download needs the package lists; fetch them once if this machine has none.
if ! (cd "$work" && apt-get download "${packages[@]}" >/dev/null 2>&1); then
  apt-get update -qq >/dev/null 2>&1 || true
  (cd "$work" && apt-get download "${packages[@]}")
fi
rm -rf "$root"
mkdir -p "$root/bin"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$root/pkg"; done
libs=$(find "$PWD/$root/pkg" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
for tool in h2load nghttp; do
  # A wrapper, so the unpacked libraries are found without installing them system-wide.
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$libs" "$PWD/$root/pkg/usr/bin/$tool" >"$root/bin/$tool"
  chmod +x "$root/bin/$tool"
done
"$root/bin/h2load" --version >/dev/null
touch "$stamp"
echo "install-test-deps: h2load and nghttp in $root/bin" >&2
