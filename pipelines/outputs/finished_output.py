"""An output a conversion finished, as the commands that read one (verify,
inspect, spec, report) and the Python API open it."""
from __future__ import annotations

from tfrecord_pipelines.transforms.storage import fsutil, layout


def no_manifest(output: str) -> str:
    """Why there is nothing to verify; for a --versioned root, which version to verify."""
    try:
        version = layout.read_pointer(output) or ""
    except ValueError:  # a LATEST that is not a version name, or not a file: not a root of versions either
        version = ""
    if version:
        return (f"{output} is a dataset root of versions (--versioned): it has {layout.LATEST}, which names "
                f"{version!r}, and no {layout.MANIFEST} of its own. Verify that version: tfrecords verify "
                f"{fsutil.join(output, version)}")
    return (f"{output}: no {layout.MANIFEST}: not a complete output (a conversion that did not finish, or not a "
            "dataset)")
