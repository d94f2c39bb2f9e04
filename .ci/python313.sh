#!/usr/bin/env bash
# Print the path of a working CPython 3.13, building one from Debian's source package when the
# machine has none. The build (about 25 minutes on 2 cores) is cached outside the checkout, in
# ${MARLJAX_PYTHON_CACHE:-~/.cache/marljax-python}, so a rerun on the same machine reuses it.
#
#   PY313="$(bash .ci/python313.sh)"
#
# Where one is looked for, in order: `python3.13` on PATH (a pyenv shim counts only if it runs),
# pyenv's own versions, the cache. Debian's sources are read through apt's own options
# (Dir::Etc::SourceList, Dir::State::Lists) from a list written in the cache: the system's apt
# sources are left as they are. Everything but the path goes to stderr.
set -euo pipefail
CACHE="${MARLJAX_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/marljax-python}"
PREFIX="$CACHE/3.13"

works() { "$1" -c 'import ssl, sqlite3, lzma, ctypes, bz2, venv, sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; }

for candidate in "$(command -v python3.13 || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13 "$PREFIX/bin/python3.13"; do
  if [[ -n "$candidate" && -x "$candidate" ]] && works "$candidate"; then echo "$candidate"; exit 0; fi
done

echo "python313.sh: no working Python 3.13 here; building one from Debian's source package into $PREFIX" >&2
mkdir -p "$CACHE/apt/lists/partial" "$CACHE/src"
# the machine's own Debian mirror, from its apt sources (deb822 or one-line format)
MIRROR="$(grep -rhE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
  | grep -oE 'https?://[^ ]+/debian/?' | head -1 || true)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${MIRROR%/} trixie main" > "$CACHE/apt/sources.list"
APT_OPTS=(-o "Dir::Etc::SourceList=$CACHE/apt/sources.list" -o "Dir::Etc::SourceParts=-"
          -o "Dir::State::Lists=$CACHE/apt/lists")
{
  apt-get "${APT_OPTS[@]}" update
  apt-get update
  apt-get install -y --no-install-recommends build-essential libssl-dev zlib1g-dev libffi-dev libbz2-dev \
    liblzma-dev libsqlite3-dev libreadline-dev uuid-dev dpkg-dev
  cd "$CACHE/src"
  apt-get "${APT_OPTS[@]}" source --download-only python3.13
  rm -rf build && mkdir build && tar -xf python3.13_*.orig.tar.xz -C build --strip-components=1
  cd build
  ./configure --prefix="$PREFIX" --with-ensurepip=install
  nice make -j"$(nproc)"
  make install
} >&2
works "$PREFIX/bin/python3.13" || { echo "python313.sh: the build in $PREFIX does not run" >&2; exit 1; }
echo "$PREFIX/bin/python3.13"
