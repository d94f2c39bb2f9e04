#!/usr/bin/env bash
# Print the path of a working CPython 3.13 already on this machine, or say on stderr that there is
# none and exit 1 (CI's leg 2 then says so and skips). Nothing is built or installed here: building
# one took about 25 minutes on 2 cores, more than half of CI's budget.
#
#   PY313="$(bash .ci/python313.sh)" || echo "no Python 3.13"
#
# Where one is looked for, in order: `python3.13` on PATH (a pyenv shim counts only if it runs),
# pyenv's own versions. One that lacks a module a venv and pip need (ssl, sqlite3, lzma, ctypes,
# bz2, venv) does not count. To give a machine one: `pyenv install 3.13` (or the distribution's
# python3.13 and python3.13-venv packages).
set -euo pipefail

works() { "$1" -c 'import ssl, sqlite3, lzma, ctypes, bz2, venv, sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; }

for candidate in "$(command -v python3.13 || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13; do
  if [[ -n "$candidate" && -x "$candidate" ]] && works "$candidate"; then echo "$candidate"; exit 0; fi
done
echo "python313.sh: no working Python 3.13 on PATH or in ${PYENV_ROOT:-$HOME/.pyenv}/versions (pyenv install 3.13 gives one)" >&2
exit 1
