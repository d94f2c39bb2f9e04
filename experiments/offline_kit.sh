#!/usr/bin/env bash
# The offline kit: everything a GPU (or TPU) node with no network lacks to install marljax and run
# its accelerator protocol, in one folder of at most 64 MiB (docs/offline_gpu.md).
#
#   bash experiments/offline_kit.sh build DIR [--jaxmarl PATH] [--node-list FILE]
#       here, with network: writes into DIR the wheel of this checkout's marljax, CPython 3.12
#       manylinux x86_64 wheels of experiments/offline_kit.txt less what the node already holds
#       (experiments/offline_node.txt, or FILE from `python3 -m pip list --format=freeze` there),
#       JaxMARL's baselines/IPPO/ippo_ff_mpe.py and its config from the checkout (or bare git
#       repository) at PATH, the
#       protocol's scripts (DIR/protocol) and DIR/MANIFEST.txt; prints the kit's size.
#   bash DIR/protocol/offline_kit.sh install DIR [--expect gpu|tpu|cpu] [--keep-installed] [--manifest-sha256 HEX]
#       on the node: every file of DIR checked against DIR/MANIFEST.txt (its list, each file's sha256,
#       the list's own digest, which --manifest-sha256 pins to the one build printed) before pip sees
#       any, refusing a missing, extra, altered or unreadable file in one line each (exit 4); then
#       `pip install --no-index --no-deps` of the kit's checked wheels over what is there,
#       never replacing an installed package (it refuses, naming it; --keep-installed keeps the
#       node's version instead), `pip check` of the kit's packages, then `marljax doctor --expect`
#       (default gpu, or $EXPECT). $PYTHON is the interpreter to install into (default python3).
#   bash experiments/offline_kit.sh rehearse DIR [--jaxmarl PATH] [--out OUT]
#       here: a cached Python 3.12 venv holding jax 0.11.2 (CPU) and the node's packages, reset to
#       that state, the kit built into DIR, then with no network at all (unshare -n where it
#       works): install, and experiments/gpu_protocol.sh OUT --small with JAX_PLATFORMS=cpu;
#       prints the summary and exits 1 unless every step exited 0.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"  # experiments/, or DIR/protocol in a kit
LIMIT_MIB=64
PY="${PYTHON:-python3}"
JAX_NODE=0.11.2  # the node's jax; the rehearsal's venv holds the CPU build of the same
# the rehearsal venv: the node's packages that marljax, the kit and the tests use (the node has them all)
NODE_MIRROR=("jax==$JAX_NODE" "jaxlib==$JAX_NODE" "numpy==2.5.2" "jaxtyping==0.3.11" "safetensors==0.8.0"
  flax optax orbax-checkpoint chex tensorstore matplotlib pillow pyyaml tqdm tensorboard pytest pytest-xdist
  pytest-timeout six seaborn pandas cloudpickle absl-py attrs wrapt protobuf packaging typing-extensions)
SOURCE_ONLY=(antlr4-python3-runtime)  # no wheel on PyPI: built here from its source archive (pure Python)
PROTOCOL_FILES=(offline_kit.sh kit_manifest.py offline_kit.txt offline_node.txt gpu_protocol.sh protocol_summary.py
  absent_extras.py failures_as_they_end.py jaxmarl_side_by_side.py jaxmarl_ippo_ff_mpe.yaml)
JAXMARL_FILES=(baselines/IPPO/ippo_ff_mpe.py baselines/IPPO/config/ippo_ff_mpe.yaml)

die() { echo "offline_kit: $*" >&2; exit 1; }
norm() { tr 'A-Z_.' 'a-z--' <<<"$1"; }  # a distribution name as pip compares them

platforms() {  # pip's --platform flags: manylinux 2.17 .. KIT_GLIBC (default 2.35: Ubuntu 22.04 and newer)
  local max="${KIT_GLIBC:-2.35}" m
  echo --platform manylinux2014_x86_64
  for ((m = 17; m <= ${max#2.}; m++)); do echo --platform "manylinux_2_${m}_x86_64"; done
}

node_names() {  # the normalized names of the node's packages, one a line
  grep -v '^\s*#' "$1" | sed 's/[=<>! ].*//' | grep . | while read -r n; do norm "$n"; done
}

kit_requirements() {  # NODE_LIST: offline_kit.txt's pins less what the node holds
  local node name req
  node="$(node_names "$1")"
  grep -v '^\s*#' "$HERE/offline_kit.txt" | grep . | while read -r req; do
    name="$(norm "${req%%==*}")"
    if grep -qx "$name" <<<"$node"; then echo "  the node has $name: not carried" >&2; else echo "$req"; fi
  done
}

build() {
  local dir="" jaxmarl="" node_list="$HERE/offline_node.txt"
  while (($#)); do
    case $1 in
      --jaxmarl) jaxmarl="$2"; shift 2 ;;
      --node-list) node_list="$2"; shift 2 ;;
      -*) die "build: unknown option $1" ;;
      *) dir="$1"; shift ;;
    esac
  done
  [[ -n $dir ]] || die "usage: offline_kit.sh build DIR [--jaxmarl PATH] [--node-list FILE]"
  local root
  root="$(cd "$HERE/.." && pwd)"
  [[ -f $root/pyproject.toml ]] || die "build runs from a marljax checkout (no pyproject.toml in $root)"
  if [[ -d $dir && -n "$(ls -A "$dir")" && ! -f $dir/MANIFEST.txt ]]; then
    die "$dir is not empty and holds no kit (MANIFEST.txt): give a new or empty folder"
  fi
  mkdir -p "$dir"
  rm -rf "${dir:?}"/*.whl "$dir/protocol" "$dir/JaxMARL" "$dir/MANIFEST.txt"

  local reqs binary=() source=() req
  reqs="$(kit_requirements "$node_list")"
  for req in $reqs; do
    if printf '%s\n' "${SOURCE_ONLY[@]}" | grep -qx "$(norm "${req%%==*}")"; then source+=("$req"); else binary+=("$req"); fi
  done
  echo "== wheels for CPython 3.12 manylinux x86_64: ${binary[*]}"
  # shellcheck disable=SC2046
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --abi abi3 --abi none $(platforms) -d "$dir" "${binary[@]}"
  if ((${#source[@]})); then
    echo "== built from source (pure Python): ${source[*]}"
    "$PY" -m pip wheel --quiet --no-deps --no-binary=:all: -w "$dir" "${source[@]}"
  fi
  echo "== marljax from $root"
  "$PY" -m pip wheel --quiet --no-deps --no-build-isolation -w "$dir" "$root" 2>/dev/null \
    || "$PY" -m pip wheel --quiet --no-deps -w "$dir" "$root"
  rm -rf "$root/build"  # setuptools' scratch folder

  local jaxmarl_commit="none"
  if [[ -n $jaxmarl ]]; then
    local f git=(git -C "$jaxmarl")
    [[ -f $jaxmarl/HEAD && -d $jaxmarl/objects ]] && git=(git --git-dir="$jaxmarl")  # a bare repository
    for f in "${JAXMARL_FILES[@]}"; do
      mkdir -p "$dir/JaxMARL/$(dirname "$f")"
      if [[ ${git[1]} == --git-dir=* ]]; then
        "${git[@]}" show "HEAD:$f" >"$dir/JaxMARL/$f" 2>/dev/null || die "--jaxmarl $jaxmarl: no $f at its HEAD"
      else
        [[ -f $jaxmarl/$f ]] || die "--jaxmarl $jaxmarl: no $f there"
        cp "$jaxmarl/$f" "$dir/JaxMARL/$f"
      fi
    done
    jaxmarl_commit="$("${git[@]}" rev-parse HEAD 2>/dev/null || echo "unknown (not a git checkout)")"
  else
    echo "offline_kit: no --jaxmarl PATH: the kit holds no JaxMARL baseline, so the protocol's jaxmarl_* steps will fail" >&2
  fi
  mkdir -p "$dir/protocol"
  for f in "${PROTOCOL_FILES[@]}"; do cp "$HERE/$f" "$dir/protocol/"; done

  manifest "$dir" "$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)" "$jaxmarl_commit" "$node_list"
  local bytes
  bytes="$(du -sb "$dir" | cut -f1)"
  printf 'kit %s: %s bytes (%.1f MiB of %d)\n' "$dir" "$bytes" "$(awk "BEGIN {print $bytes / 1048576}")" "$LIMIT_MIB"
  ((bytes <= LIMIT_MIB * 1048576)) || die "the kit is over $LIMIT_MIB MiB"
}

manifest() {  # DIR MARLJAX_COMMIT JAXMARL_COMMIT NODE_LIST: DIR/MANIFEST.txt (every file's size and sha256,
  # then the digest of those lines), printed too
  "$PY" "$HERE/kit_manifest.py" write "$@"
}

install_plan() {  # KEEP WHEEL...: prints "install WHEEL" or "skip WHEEL why" per wheel; exit 3 on a refusal
  "$PY" - "$@" <<'EOF'
import re, sys
from importlib.metadata import PackageNotFoundError, version

keep, wheels = sys.argv[1] == "1", sys.argv[2:]
refused = []
for wheel in wheels:
    name, kit = wheel.rsplit("/", 1)[-1].split("-")[:2]
    try:
        have = version(re.sub(r"[-_.]+", "-", name).lower())
    except PackageNotFoundError:
        print("install", wheel)
        continue
    if name == "marljax":  # ours: the checkout's wheel always replaces an older install of it
        print("install", wheel)
    elif have == kit:
        print("skip", wheel, f"{name} {have} is installed already")
    elif keep:
        print("skip", wheel, f"kept the installed {name} {have} (the kit has {kit})")
    else:
        refused.append(f"{name} {have} is installed and the kit has {kit}")
for line in refused:
    print(f"offline_kit: refused: {line}: installing would replace it", file=sys.stderr)
if refused:
    print("offline_kit: rebuild the kit with --node-list FILE (FILE: `python3 -m pip list --format=freeze` on this "
          "node), or install with --keep-installed to keep this node's versions", file=sys.stderr)
    sys.exit(3)
EOF
}

install() {
  local dir="" expect="${EXPECT:-gpu}" keep=0 pinned=""
  while (($#)); do
    case $1 in
      --expect) expect="$2"; shift 2 ;;
      --keep-installed) keep=1; shift ;;
      --manifest-sha256) pinned="$2"; shift 2 ;;
      -*) die "install: unknown option $1" ;;
      *) dir="$1"; shift ;;
    esac
  done
  [[ -n $dir ]] || die "usage: offline_kit.sh install DIR [--expect gpu|tpu|cpu] [--keep-installed] [--manifest-sha256 HEX]"
  [[ -d $dir ]] || die "no kit at $dir: give the folder that offline_kit.sh build DIR wrote"
  # every file of the kit checked against MANIFEST.txt before pip sees any; pip installs the wheels'
  # checked copies in $STAGE (exit 4 and one line per refused file otherwise)
  STAGE="$(mktemp -d)"
  trap 'rm -rf "$STAGE"' EXIT
  "$PY" "$HERE/kit_manifest.py" verify "$dir" "$STAGE" ${pinned:+"$pinned"} || exit $?
  local wheels=("$STAGE"/*.whl)
  [[ -f ${wheels[0]} ]] || die "no wheels in $dir: build the kit first (offline_kit.sh build DIR)"
  echo "== installing into $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  local plan todo=()
  plan="$(install_plan "$keep" "${wheels[@]}")" || exit $?
  while read -r action wheel why; do
    if [[ $action == install ]]; then todo+=("$wheel"); else echo "  $why"; fi
  done <<<"$plan"
  if ((${#todo[@]})); then
    "$PY" -m pip install --isolated --no-index --no-deps --force-reinstall --no-warn-script-location "${todo[@]}"
  fi
  check_kit_deps "${wheels[@]}"
  echo "== marljax doctor --expect $expect"
  "$PY" -m marljax.cli doctor --expect "$expect"
}

check_kit_deps() {  # WHEEL...: `pip check`, failing only on lines about a package of the kit
  local names line bad=0
  names="$(for w in "$@"; do norm "$(basename "$w" | cut -d- -f1)"; done)"
  while read -r line; do
    [[ -n $line ]] || continue
    if grep -qxF -f <(tr ' ,' '\n\n' <<<"$line" | grep . | while read -r w; do norm "$w"; done) <<<"$names"; then
      echo "  pip check: $line"; bad=1
    else
      echo "  pip check (not the kit's): $line"
    fi
  done < <("$PY" -m pip check 2>&1 | grep -v "^No broken requirements" || true)
  ((bad == 0)) || die "a package of the kit lacks a dependency (above): add it to experiments/offline_kit.txt"
  echo "  pip check: the kit's packages have every dependency they declare"
}

rehearsal_python() {  # a Python 3.12 (the node's minor), else 3.13
  local p
  for p in "${REHEARSAL_PYTHON:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python python3.13 \
    /root/.pyenv/versions/3.13*/bin/python; do
    [[ -n $p ]] && "$p" -c 'import sys; assert sys.version_info[:2] in ((3, 12), (3, 13))' 2>/dev/null \
      && { "$p" -c 'import sys; print(sys.executable)'; return; }
  done
  die "rehearse needs Python 3.12 or 3.13 (set REHEARSAL_PYTHON)"
}

node_venv() {  # the cached venv holding the node's packages, reset to just those; prints its python
  local venv="${MARLJAX_REHEARSAL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/marljax/rehearsal-jax$JAX_NODE}"
  local stamp="${NODE_MIRROR[*]}"
  if [[ ! -x $venv/bin/python || "$(cat "$venv/node-stamp" 2>/dev/null)" != "$stamp" ]]; then
    echo "== a venv like the node's in $venv (from PyPI, once)" >&2
    rm -rf "$venv"
    "$(rehearsal_python)" -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet "${NODE_MIRROR[@]}" >&2
    "$venv/bin/python" -m pip freeze | sed 's/==.*//' >"$venv/node-freeze.txt"
    echo "$stamp" >"$venv/node-stamp"
  fi
  local extra
  extra="$("$venv/bin/python" -m pip freeze | sed 's/==.*//; s/ @ .*//' | grep -vxFf "$venv/node-freeze.txt" || true)"
  if [[ -n $extra ]]; then
    echo "== reset the venv to the node's packages: uninstall $(tr '\n' ' ' <<<"$extra")" >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip uninstall --quiet -y $extra >&2
  fi
  rm -rf "$venv"/lib/python3*/site-packages/~*  # what an interrupted uninstall leaves behind
  echo "$venv/bin/python"
}

offline() {  # CMD...: run CMD with no network at all where this machine allows (root, unshare -n)
  if unshare -n true 2>/dev/null; then unshare -n "$@"; else
    echo "offline_kit: unshare -n is not allowed here: only pip's --no-index keeps this run offline" >&2
    "$@"
  fi
}

rehearse() {
  local dir="" jaxmarl="" out=""
  while (($#)); do
    case $1 in
      --jaxmarl) jaxmarl="$2"; shift 2 ;;
      --out) out="$2"; shift 2 ;;
      -*) die "rehearse: unknown option $1" ;;
      *) dir="$1"; shift ;;
    esac
  done
  [[ -n $dir ]] || die "usage: offline_kit.sh rehearse DIR [--jaxmarl PATH] [--out OUT]"
  out="${out:-$dir.rehearsal}"
  local python root
  root="$(cd "$HERE/.." && pwd)"
  python="$(node_venv)"
  build "$dir" ${jaxmarl:+--jaxmarl "$jaxmarl"}
  dir="$(cd "$dir" && pwd)"
  rm -rf "$out" && mkdir -p "$out" && out="$(cd "$out" && pwd)"
  echo "== offline from here on: install, then the protocol (--small, JAX_PLATFORMS=cpu)"
  offline env PYTHON="$python" PIP_NO_INDEX=1 bash "$dir/protocol/offline_kit.sh" install "$dir" --expect cpu
  not_on_node "$python" "$dir"
  cd "$root"
  offline env PYTHON="$python" JAX_PLATFORMS=cpu EXPECT=cpu bash "$dir/protocol/gpu_protocol.sh" "$out" --small \
    --kit "$dir" || true
  "$python" "$dir/protocol/protocol_summary.py" "$out" --check >/dev/null
  echo "rehearsal: every step exited 0 ($(basename "$python") $dir/protocol/protocol_summary.py $out --check)"
}

not_on_node() {  # PYTHON DIR: warn about what the venv holds that neither the node's list nor the kit has
  local names
  names="$( (node_names "$HERE/offline_node.txt"; for w in "$2"/*.whl; do norm "$(basename "$w" | cut -d- -f1)"; done) | sort -u)"
  "$1" -m pip freeze | sed 's/==.*//; s/ @ .*//' | while read -r n; do
    grep -qx "$(norm "$n")" <<<"$names" || echo "  note: the rehearsal venv holds $n, which offline_node.txt does not list"
  done
}

case "${1:-}" in
  build | install | rehearse) cmd=$1; shift; "$cmd" "$@" ;;
  *) die "usage: offline_kit.sh build DIR [--jaxmarl PATH] [--node-list FILE] | install DIR [--expect gpu|tpu|cpu] [--keep-installed] [--manifest-sha256 HEX] | rehearse DIR [--jaxmarl PATH] [--out OUT]" ;;
esac
