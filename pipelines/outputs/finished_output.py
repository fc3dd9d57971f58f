"""An output a conversion finished, as the commands that read one (verify,
inspect, spec, report) and the Python API open it: a folder with a manifest,
or a --versioned dataset root, read at the version its LATEST names."""
from __future__ import annotations

import os

from tfrecord_pipelines.transforms.core.errors import OutputError
from tfrecord_pipelines.transforms.storage import fsutil, layout, untrusted


def follow_latest(output: str) -> tuple[str, str]:
    """(the folder to read, the version LATEST names or "" when `output` is
    read itself): `output` when it has a manifest or no LATEST, else the
    version LATEST names. LATEST is read as untrusted input (layout.read_pointer:
    a small regular file holding a version name), and the version folder only
    inside the root (a link out of it is refused); raises OutputError."""
    if fsutil.exists(fsutil.join(output, layout.MANIFEST)):
        return output, ""
    try:
        version = layout.read_pointer(output)
    except ValueError as e:  # a FIFO, a device, too large, a link out of the root, not a version name
        raise OutputError(str(e)) from None
    if version is None:
        return output, ""
    folder = fsutil.join(output, version)
    if fsutil.is_local(folder) and os.path.lexists(folder) and not untrusted.inside(folder, output):
        raise OutputError(f"{folder} (which {layout.LATEST} names) is a link to {os.path.realpath(folder)}, "
                          f"outside {output}: not read")
    return folder, version


def version_line(root: str, version: str, folder: str) -> str:
    """What a command reading a --versioned root says first: which version it read."""
    return f"{root}: {layout.LATEST} names version {version}; reading {folder}"


def no_manifest(output: str) -> str:
    """Why there is nothing to read in `output`."""
    return (f"{output}: no {layout.MANIFEST}: not a complete output (a conversion that did not finish, or not a "
            "dataset)")


def followed(given: str) -> tuple[str, str]:
    """(the folder a command reads for the OUTPUT it was given, the line that
    says which version it read, "" when it reads OUTPUT itself); OutputError
    when LATEST cannot be followed safely."""
    root = fsutil.normalize_root(given)
    folder, version = follow_latest(root)
    return folder, version_line(root, version, folder) if version else ""
