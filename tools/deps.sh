#!/bin/sh
# Installs the Debian packages emmy needs when any is missing; explains what to run when not root.
# A package counts as present when dpkg has it installed or a command of its name is on PATH (npm, chromium: a
# machine whose Node.js comes from elsewhere ships its own npm, and Debian's npm package then conflicts with it).
# The missing ones go in one apt-get call; when that fails, each is tried alone, so that one package that cannot be
# installed (that conflict) does not keep the others out; the exit status is 1 when any is still missing.
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  command -v "$p" >/dev/null 2>&1 && continue
  missing="$missing $p"
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
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1 && exit 0
failed=""
for p in $missing; do
  $SUDO apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 || failed="$failed $p"
done
[ -z "$failed" ] && exit 0
echo "emmy: apt-get install failed for:$failed" >&2
exit 1
