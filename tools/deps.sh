#!/bin/sh
# Installs the Debian packages emmy needs when any is missing; explains what to run when not root.
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; else
    echo "emmy: missing Debian packages:$missing — run: sudo apt-get install -y$missing" >&2
    exit 1
  fi
fi
echo "emmy: installing Debian packages:$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null && $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null || {
  echo "emmy: apt-get install failed for:$missing" >&2; exit 1; }
