"""Reading an uploaded model archive into memory, safely: names, kinds and sizes checked.

An archive is a tar (optionally gzip/bz2/xz-compressed) or a list of uploaded files (multipart).
Nothing is extracted by ``tarfile``: each member is checked here and read into memory, so no
path in it can reach the filesystem. Refused, naming the entry: absolute paths, ``..``,
backslashes, NUL or control characters, links (symbolic and hard), devices, FIFOs, anything
but regular files and folders, more than ``max_files`` files, more than ``max_unpacked_bytes``
bytes in total (a compression bomb stops at the bound, it is never inflated further), and the
same name twice. Folders are allowed only as a common top-level folder (``tar -C DIR .`` or
``tar czf x.tgz mymodel/``), which is stripped.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable
from pathlib import PurePosixPath

__all__ = ["ArchiveError", "read_parts", "read_tar"]


class ArchiveError(Exception):
    """A refused archive: ``status`` 400 (malformed) or 413 (too large), naming the entry."""

    def __init__(self, status: int, file: str, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.status, self.file, self.message = status, file, message


def _clean(name: str) -> PurePosixPath:
    if not name or "\\" in name or any(ord(c) < 32 for c in name):
        raise ArchiveError(400, repr(name)[:120], "entry name is empty or has backslashes or "
                           "control characters")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveError(400, name[:200], "entry escapes the model folder (absolute path or "
                           "'..')")
    parts = [p for p in path.parts if p != "."]
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


def _strip_top(files: dict[PurePosixPath, bytes]) -> dict[str, bytes]:
    """Drop one folder level when every file sits in the same top-level folder."""
    tops = {p.parts[0] for p in files if len(p.parts) > 1}
    if len(tops) == 1 and all(len(p.parts) > 1 for p in files):
        files = {PurePosixPath(*p.parts[1:]): b for p, b in files.items()}
    out: dict[str, bytes] = {}
    for path, data in files.items():
        if len(path.parts) != 1:
            raise ArchiveError(400, str(path), "nested folders are not part of a model version "
                               "(config.yaml and the weight file sit side by side)")
        out[path.name] = data
    return out


class _Budget:
    def __init__(self, max_files: int, max_bytes: int) -> None:
        self.files, self.bytes = max_files, max_bytes

    def take(self, name: str, size: int) -> None:
        self.files -= 1
        self.bytes -= size
        if self.files < 0:
            raise ArchiveError(413, name, "too many files in the archive")
        if self.bytes < 0:
            raise ArchiveError(413, name, "unpacked size exceeds the publish limit "
                               "(publish.max_unpacked_bytes)")


def read_tar(data: bytes, *, max_files: int, max_unpacked_bytes: int) -> dict[str, bytes]:
    """The regular files of a tar archive by name; raises ArchiveError."""
    budget = _Budget(max_files, max_unpacked_bytes)
    files: dict[PurePosixPath, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for member in tar:
                path = _clean(member.name)
                if member.isdir():
                    continue
                if not member.isreg():
                    raise ArchiveError(400, member.name, "not a regular file (links, devices "
                                       "and FIFOs are refused)")
                budget.take(member.name, member.size)
                f = tar.extractfile(member)
                if f is None:
                    raise ArchiveError(400, member.name, "unreadable entry")
                if path in files:
                    raise ArchiveError(400, member.name, "appears twice in the archive")
                files[path] = f.read(member.size + 1)
                if len(files[path]) != member.size:
                    raise ArchiveError(400, member.name, "entry size does not match its header")
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        # zlib/lzma errors of a corrupt compressed stream surface as OSError/EOFError/ValueError
        raise ArchiveError(400, "archive", f"not a readable tar archive ({type(e).__name__}: "
                           f"{e})"[:300]) from None
    return _strip_top(files)


def read_parts(parts: Iterable[tuple[str, bytes]], *, max_files: int,
               max_unpacked_bytes: int) -> dict[str, bytes]:
    """Uploaded files (multipart: each part's filename and bytes); raises ArchiveError."""
    budget = _Budget(max_files, max_unpacked_bytes)
    files: dict[PurePosixPath, bytes] = {}
    for name, data in parts:
        path = _clean(name)
        budget.take(name, len(data))
        if path in files:
            raise ArchiveError(400, name, "uploaded twice")
        files[path] = data
    return _strip_top(files)
