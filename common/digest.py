"""Content digests (xxh3-128, the hash datasets itself depends on): of bytes or text, and of files by name and bytes.
Runs in: the training venv (xxhash, imported on first use: importing this module needs the standard library only).
"""

from __future__ import annotations

from pathlib import Path


def digest(data: bytes | str) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest(data.encode() if isinstance(data, str) else data)


def files_digest(files, root: Path | None = None) -> str:
    """One digest of the files' names (relative to `root`, else the bare name) and bytes, read in 8 MiB pieces."""
    import xxhash

    hasher = xxhash.xxh3_128()
    for file in files:
        file = Path(file)
        hasher.update(f"\0{file.relative_to(root) if root else file.name}\0".encode())
        with open(file, "rb") as handle:
            while piece := handle.read(8 << 20):
                hasher.update(piece)
    return hasher.hexdigest()
