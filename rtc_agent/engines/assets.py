"""Model files that ship inside PyPI packages: locating them without importing the package, and assembling
split files into the cache folder once.

Nothing here downloads anything: a missing package is an error that names the package to install.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


class MissingAsset(RuntimeError):
    """A packaged model file is not installed."""


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it (some import torch at top level)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingAsset(f"the package {package!r} is not installed (pip install {package.replace('_', '-')})")
    return Path(next(iter(spec.submodule_search_locations)))


def package_file(package: str, *parts: str) -> Path:
    path = package_dir(package).joinpath(*parts)
    if not path.exists():
        raise MissingAsset(f"{path} is missing from the installed package {package!r}")
    return path


def assemble(parts: Sequence[Path], target: Path, *, expected_size: int | None = None,
             progress: Callable[[str], None] | None = None) -> Path:
    """Concatenate ``parts`` into ``target`` once (atomically); later calls only check the size.

    ``expected_size`` defaults to the sum of the parts' sizes; a target of another size is rebuilt.
    """
    size = expected_size if expected_size is not None else sum(p.stat().st_size for p in parts)
    if target.exists() and target.stat().st_size == size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: log.info("%s", msg))
    say(f"assembling {target.name} from {len(parts)} parts into {target.parent}")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".")
    try:
        with os.fdopen(fd, "wb") as out:
            for i, part in enumerate(parts, 1):
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=16 * 1024 * 1024)
                say(f"assembling {target.name}: part {i}/{len(parts)} done")
        if os.path.getsize(tmp) != size:
            raise MissingAsset(f"assembled {target.name} has {os.path.getsize(tmp)} bytes, expected {size}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
