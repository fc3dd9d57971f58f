"""MkDocs hook: lay the installed package out as Python sees it, for the API reference.

`setup.py` maps the repository's `pipelines/` to `tfrecord_pipelines` and `transforms/` to
`tfrecord_pipelines.transforms` (`package_dir`). mkdocstrings reads sources statically (griffe),
which finds the top-level package through the editable install but not a subpackage that
lives outside its folder, so the reference would miss the errors and anything else under
`transforms/`. This builds `build/api_src/tfrecord_pipelines/` out of symbolic links (the
package's files, plus `transforms`), which `mkdocs.yml` gives mkdocstrings as its path.
"""
from __future__ import annotations

import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREE = os.path.join(ROOT, "build", "api_src", "tfrecord_pipelines")


def on_startup(command, dirty):  # before mkdocstrings drops a search path that does not exist yet
    shutil.rmtree(TREE, ignore_errors=True)
    os.makedirs(TREE)
    source = os.path.join(ROOT, "pipelines")
    for name in os.listdir(source):
        if name != "__pycache__":
            os.symlink(os.path.join(source, name), os.path.join(TREE, name))
    os.symlink(os.path.join(ROOT, "transforms"), os.path.join(TREE, "transforms"))
