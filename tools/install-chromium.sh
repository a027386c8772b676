#!/usr/bin/env bash
# Headless Chromium (Debian's `chromium`) for the test that renders the demo's HTML report.
# Unpacked without root: `apt-get download` the package and the libraries this system lacks, then
# `dpkg -x` them into .cache/chromium (git-ignored). Prints the browser's path; idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=${SONIC_CHROMIUM_DIR:-$PWD/.cache/chromium}
wrapper="$root/chromium"
if [[ -x "$wrapper" ]]; then echo "$wrapper"; exit 0; fi
if command -v chromium >/dev/null; then command -v chromium; exit 0; fi
command -v apt-get >/dev/null || { echo "install-chromium: needs Debian/Ubuntu apt-get" >&2; exit 1; }
mkdir -p "$root/debs" "$root/tree"
# What `apt-get install chromium` would add to this system (without recommends): those packages only.
packages=$(apt-get install -s --no-install-recommends chromium 2>/dev/null | awk '/^Inst /{print $2}')
[[ -n "$packages" ]] || { echo "install-chromium: apt-get found no chromium package (run apt-get update?)" >&2; exit 1; }
(cd "$root/debs" && apt-get download $packages >&2)
for deb in "$root"/debs/*.deb; do dpkg -x "$deb" "$root/tree"; done
libs=$(find "$root/tree" -name '*.so*' -printf '%h\n' | sort -u | tr '\n' ':')
cat > "$wrapper.tmp" <<WRAP
#!/usr/bin/env bash
export LD_LIBRARY_PATH="${libs}\${LD_LIBRARY_PATH:-}"
exec "$root/tree/usr/lib/chromium/chromium" "\$@"
WRAP
chmod +x "$wrapper.tmp"
mv "$wrapper.tmp" "$wrapper"
echo "$wrapper"
