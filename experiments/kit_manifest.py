"""The offline kit's MANIFEST.txt: written by `offline_kit.sh build`, checked by `install` before pip
sees any file (docs/offline_gpu.md).

    python3 kit_manifest.py write DIR MARLJAX_COMMIT JAXMARL_COMMIT NODE_LIST
    python3 kit_manifest.py verify DIR STAGE [MANIFEST_SHA256]

MANIFEST.txt lists every file of the kit with its size and full sha256; its last line is the sha256
of the lines above it, so an edited or truncated list is refused before it is read. `verify` refuses,
one line each, a file the list lacks, a listed file the kit lacks, a file whose bytes differ, one that
cannot be read or is not a regular file, and exits 4; else it copies the top-level wheels into STAGE
from the very bytes it checked (pip installs those copies, not whatever the kit holds a moment
later). Python 3.8 and up, standard library only: it runs on the node before anything is installed.
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from pathlib import Path

NAME = "MANIFEST.txt"
HEADER_LINES = 3
OWN_DIGEST = re.compile(r"manifest sha256:([0-9a-f]{64}) of the lines above")
ENTRY = re.compile(r"\s*([\d,]+)  (?:wheel|file )  (\S+) .*sha256:([0-9a-f]{64})")
MAX_LINES = 20  # refusals printed; the rest are counted
REFUSED = 4  # install's exit status for a kit that does not match its MANIFEST.txt


class Refused(Exception):
    """The kit does not match its MANIFEST.txt: args, one line each."""


def write(kit: Path, marljax_commit: str, jaxmarl_commit: str, node_list: str) -> str:
    """Writes kit/MANIFEST.txt over every file under kit and returns its text."""
    lines = [
        f"marljax offline kit, built {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"for CPython 3.12, manylinux x86_64, over the packages of {Path(node_list).name}",
        f"marljax checkout {marljax_commit}; JaxMARL checkout {jaxmarl_commit}",
    ]
    files = sorted(p for p in kit.rglob("*") if p.is_file() and p.relative_to(kit) != Path(NAME))
    for p in files:
        name = p.relative_to(kit).as_posix()
        if any(c.isspace() for c in name):  # verify reads a name as one word
            raise Refused(f"{str(kit / name)!r}: a kit's file names hold no spaces: remove or rename it")
        kind, what = ("wheel", " ".join(p.name.split("-")[:2])) if p.suffix == ".whl" else ("file", "")
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        lines.append(f"{p.stat().st_size:>10,}  {kind:<5}  {name:<72} {what:<40} sha256:{digest}")
    lines.append(f"{sum(p.stat().st_size for p in files):>10,}  in all, {len(files)} files")
    text = "".join(line + "\n" for line in lines)
    text += f"manifest sha256:{hashlib.sha256(text.encode()).hexdigest()} of the lines above\n"
    (kit / NAME).write_text(text)
    return text


def _read_list(path: Path, pinned: str) -> tuple[str, dict[str, tuple[int, str]]]:
    """MANIFEST.txt's own digest and {relative name: (size, sha256)}, once its digest matches."""
    try:
        text = path.read_bytes().decode()
    except FileNotFoundError:
        raise Refused(f"{path.parent} holds no {NAME}: give the folder that offline_kit.sh build DIR wrote") from None
    except (OSError, UnicodeDecodeError) as e:
        raise Refused(f"{path} cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})") from None
    body, _, tail = text.rstrip("\n").rpartition("\n")
    body += "\n"
    own = OWN_DIGEST.fullmatch(tail)
    if own is None:
        raise Refused(
            f"{path}'s last line is not the digest of its lines (a truncated list, or a kit built before install "
            "checked one): rebuild the kit"
        )
    if hashlib.sha256(body.encode()).hexdigest() != own[1]:
        raise Refused(f"{path} was changed after the build: its lines do not match the digest on its last line")
    if pinned and own[1] != pinned.lower():
        raise Refused(f"{path} is sha256:{own[1]}, not the sha256:{pinned} given with --manifest-sha256")
    listed: dict[str, tuple[int, str]] = {}
    for number, line in enumerate(body.splitlines()[HEADER_LINES:-1], start=HEADER_LINES + 1):
        entry = ENTRY.fullmatch(line)
        if entry is None or entry[2] == NAME or entry[2].startswith("/") or ".." in entry[2].split("/"):
            raise Refused(f"{path} line {number} is not a file of the kit with its size and sha256: {line[:60]!r}")
        listed[entry[2]] = (int(entry[1].replace(",", "")), entry[3])
    return own[1], listed


def _whose(name: str) -> str:
    """Who likely wrote an extra file: Python's byte-code cache appears when the protocol has run from the kit."""
    if "__pycache__" in name.split("/"):
        return "Python's cache, written when the protocol ran from the kit, or planted: it would run instead of the .py"
    return "the build wrote no such file"


def verify(kit: Path, stage: Path, pinned: str = "") -> tuple[str, int]:
    """Checks every file of kit against its MANIFEST.txt, then copies its wheels into stage.
    Returns the MANIFEST's own digest and the number of files; raises Refused with every mismatch
    before writing anything."""
    own, listed = _read_list(kit / NAME, pinned)
    present = {p.relative_to(kit).as_posix(): p for p in kit.rglob("*") if not p.is_dir() or p.is_symlink()}
    present.pop(NAME)
    extra, missing = sorted(present.keys() - listed.keys()), sorted(listed.keys() - present.keys())
    problems = [f"{kit / n} is not in {NAME} ({_whose(n)}): remove it" for n in extra]
    problems += [f"{kit / n} is in {NAME} and missing from the kit: copy the whole kit" for n in missing]
    checked: dict[str, bytes] = {}
    for name in sorted(listed.keys() & present.keys()):
        path, (size, digest) = present[name], listed[name]
        if path.is_symlink() or not path.is_file():
            problems.append(
                f"{path} is {'a symlink' if path.is_symlink() else 'not a regular file'}; the build wrote a file"
            )
            continue
        try:
            data = path.read_bytes()
        except OSError as e:
            problems.append(f"{path} cannot be read ({e.strerror})")
            continue
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            problems.append(
                f"{path} differs from the file the kit was built with: {len(data):,} bytes sha256:{actual[:16]}..., "
                f"{NAME} lists {size:,} bytes sha256:{digest[:16]}..."
            )
        elif "/" not in name and name.endswith(".whl"):
            checked[name] = data
    if problems:
        raise Refused(*problems)
    for name, data in checked.items():
        (stage / name).write_bytes(data)
    return own, len(listed)


def main(argv: list[str]) -> int:
    if argv[:1] == ["write"] and len(argv) == 5:
        try:
            print(write(Path(argv[1]), *argv[2:]), end="")
        except Refused as e:
            print(f"offline_kit: {e.args[0]}", file=sys.stderr)
            return 1
        return 0
    if argv[:1] == ["verify"] and len(argv) in (3, 4):
        try:
            own, count = verify(Path(argv[1]), Path(argv[2]), (argv[3:] or [""])[0])
        except Refused as e:
            for line in e.args[:MAX_LINES]:
                print(f"offline_kit: refused: {line}; nothing was installed", file=sys.stderr)
            if len(e.args) > MAX_LINES:
                print(f"offline_kit: refused: {len(e.args) - MAX_LINES} more entries like these", file=sys.stderr)
            return REFUSED
        print(f"== verified {count} files against {Path(argv[1]) / NAME} (sha256:{own})")
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
