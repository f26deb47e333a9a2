"""TorchServe's model archive (``.mar``): a zip with ``MAR-INF/MANIFEST.json`` at its top.

An archive is user input that may come from anywhere (``POST /models?url=NAME.mar`` names one),
so it is unpacked with bounds: no member may leave the folder (absolute paths, ``..``, links),
nor may there be more members or bytes than ``Limits`` allows; a bad archive is a ``ConfigError``
that says why, never a half-written folder.
"""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from rosettaserve.repository.config import ConfigError

MANIFEST = "MAR-INF/MANIFEST.json"
DEFAULT_FILE = "model.mar"


@dataclass(frozen=True)
class Limits:
    members: int = 10_000
    unpacked_bytes: int = 16 << 30  # TorchServe's own archives of LLMs reach a few GiB


@dataclass(frozen=True)
class Archive:
    folder: Path  # the unpacked archive: the handler's model_dir
    manifest: dict[str, Any]
    temporary: bool  # unpacked by us: removed on unload

    @property
    def handler(self) -> str:
        return str(self.manifest["model"]["handler"])

    def remove(self) -> None:
        if self.temporary:
            shutil.rmtree(self.folder, ignore_errors=True)


def open_archive(path: Path, limits: Limits = Limits()) -> Archive:
    """``path``: a ``.mar`` file, or a folder holding an unpacked one (MAR-INF/ at its top)."""
    if path.is_dir():
        return Archive(path, read_manifest(path), temporary=False)
    folder = Path(tempfile.mkdtemp(prefix=f"rosettaserve-{path.stem}-"))
    try:
        unpack(path, folder, limits)
        return Archive(folder, read_manifest(folder), temporary=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def unpack(path: Path, folder: Path, limits: Limits = Limits()) -> None:
    try:
        with zipfile.ZipFile(path) as zf:
            members = zf.infolist()
            _check(members, limits)
            for member in members:
                _extract(zf, member, folder, limits)
    except zipfile.BadZipFile as exc:
        raise ConfigError(f"{path} is not a model archive (a zip file): {exc}") from None


def _check(members: list[zipfile.ZipInfo], limits: Limits) -> None:
    if len(members) > limits.members:
        raise ConfigError(f"the archive has {len(members)} members, more than {limits.members}")
    declared = sum(m.file_size for m in members)
    if declared > limits.unpacked_bytes:
        raise ConfigError(f"the archive unpacks to {declared} bytes, more than allowed")
    for member in members:
        safe_member_path(member.filename)
        if stat.S_ISLNK(member.external_attr >> 16):
            raise ConfigError(f"the archive member {member.filename!r} is a symbolic link")


def safe_member_path(name: str) -> PurePosixPath:
    """A member's path inside the folder, or a ConfigError if it would land outside it."""
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or (pure.parts and ":" in pure.parts[0]):
        raise ConfigError(f"the archive member {name!r} would land outside its folder")
    return pure


def _extract(zf: zipfile.ZipFile, member: zipfile.ZipInfo, folder: Path, limits: Limits) -> None:
    target = folder.joinpath(*safe_member_path(member.filename).parts)
    if member.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    left = member.file_size  # the size the directory declares bounds what is written
    with zf.open(member) as src, target.open("wb") as dst:
        while chunk := src.read(1 << 20):
            left -= len(chunk)
            if left < 0:
                raise ConfigError(f"the archive member {member.filename!r} is larger than declared")
            dst.write(chunk)


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{folder} has no {MANIFEST}: not a TorchServe model archive") from None
    except ValueError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None
    model = manifest.get("model") if isinstance(manifest, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("handler"), str):
        raise ConfigError(f"{path} names no handler (model.handler)")
    return dict(manifest)
