"""File I/O shared by every layer that writes: atomic replacement, and the zarr spec of the
on-disk stores (the trajectory recorder and a sweep's results store)."""

from __future__ import annotations

from pathlib import Path


def write_text_atomic(path: Path, text: str) -> Path:
    """Replace `path` with `text` all at once: a temporary file, then a rename (a crash leaves the
    old file or the new, never half of one)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def zarr_spec(path: Path) -> dict:
    """tensorstore spec of a zarr array in a local directory."""
    return {"driver": "zarr", "kvstore": {"driver": "file", "path": str(path)}}
