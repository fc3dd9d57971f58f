"""Importing Beam without the parts a local run on local files never uses.

`import apache_beam` imports every connector it ships: pandas and pyarrow (for
its DataFrame type hints), pymongo, the BigQuery, Pub/Sub and Dataflow
clients, Google Cloud Storage, S3, Azure and HDFS filesystems, apitools:
about half of its import time and memory (~0.7 s of CPU and ~110 MB), in
every process that imports Beam (the command, the workers' zygote, Beam's
own workers). Beam imports each of these inside a `try: ... except
ImportError`, as optional: so for a run that is local (the FnApiRunner) and
names no remote path, they are made to fail to import while Beam is
imported, then made importable again (anything that asks for one later,
e.g. pyarrow for tfx-bsl, gets it as usual). Two more, which Beam imports
unconditionally at the top of a module but uses only inside functions such
a run never calls (DEFERRED), are handed to Beam as stand-ins that import
the real module on first use; and names one Beam module imports from a
third (DEFERRED_NAMES: beartype) are placeholders until their first call.

Part of the speed layer (pipelines/speed/__init__.py): only the command line
does this, in a fresh process, and the worker processes of such a run
(LEAN_WORKERS_ENV); a process that imported Beam already, or that may run
something else later (the library API, the tests), imports it whole.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import types

from tfrecord_pipelines.speed.env import LEAN_WORKERS_ENV


# Each is imported by Beam only inside try/except ImportError (in
# typehints/__init__, io/__init__, io/filesystems, io/mongodbio, utils/retry,
# runners/dataflow/dataflow_runner).
UNUSED_LOCALLY = (
    "pandas", "pyarrow",                              # typehints: DataFrame/Arrow compatibility
    "pymongo", "bson",                                # io.mongodbio
    "apache_beam.io.gcp.bigquery",                    # io/__init__: BigQuery, Pub/Sub, gcsio, xlang IOs
    "apache_beam.io.gcp.gcsfilesystem",               # io.filesystems: gs://
    "apache_beam.io.aws.s3filesystem",                # s3://
    "apache_beam.io.azure.blobstoragefilesystem",     # azfs://
    "apache_beam.io.hadoopfilesystem",                # hdfs://
    "apitools",                                       # utils.retry: GCP HTTP errors
    "google.cloud.dataflow",                          # runners.dataflow: the Dataflow client
)

# Imported at the top of a Beam module but used only inside its functions (internal/http_client, the HTTP client
# of Google's APIs; transforms/external, YAML for cross-language transforms). httplib2 brings pyparsing: the two
# stand-ins save ~0.15 s of a lean `import apache_beam` (of ~0.7 s).
DEFERRED = ("httplib2", "yaml")

# Names that one Beam module imports with `from ... import` at its top and uses only inside a function such a run never
# calls (typehints/typehints, beartype's is_subhint for is_consistent_with, which the converter's graph
# never reaches; beartype alone took 0.15-0.19 s to import): {module: ((the module it imports from, name, kind))},
# kind CALL for a function, EXCEPT for an exception class named only in an `except` around those calls.
CALL, EXCEPT = "call", "except"
DEFERRED_NAMES = {
    "apache_beam.typehints.typehints": (("beartype.door", "is_subhint", CALL),
                                        ("beartype.roar", "BeartypeDoorException", EXCEPT)),
}


class _Deferred(types.ModuleType):
    """A stand-in for a module of DEFERRED in the modules that imported it
    while Beam was imported: its first attribute asked for imports the real
    module, whose names it then holds."""

    def __getattr__(self, attr: str):
        name = self.__name__
        if sys.modules.get(name) is self:
            sys.modules.pop(name, None)
        real = importlib.import_module(name)
        self.__dict__.update((k, v) for k, v in real.__dict__.items() if k != "__name__")
        return getattr(real, attr)


class _NotImportedYet(Exception):
    """Stands for a deferred exception class until the first deferred call:
    nothing raises it, and by the time the real one can be raised the name
    is the real class again (an `except` clause reads the name when it runs)."""


def _stand_ins(user: str, names: tuple) -> dict:
    """Stand-in modules holding `names` as placeholders: a function imports
    the real modules on its first call, puts every deferred name of `user`
    back to the real object, then calls the real function."""
    made: dict = {}

    def load() -> None:
        for source in made:
            if sys.modules.get(source) is made[source]:  # called while Beam is still being imported
                del sys.modules[source]
        module = sys.modules[user]
        for source, name, _ in names:
            setattr(module, name, getattr(importlib.import_module(source), name))

    def placeholder(name: str):
        def call(*args, **kwargs):
            load()
            return getattr(sys.modules[user], name)(*args, **kwargs)
        return call

    for source, name, kind in names:
        stand_in = made.setdefault(source, types.ModuleType(source))
        setattr(stand_in, name, placeholder(name) if kind == CALL else _NotImportedYet)
    return made


def import_lean() -> None:
    """`import apache_beam` with UNUSED_LOCALLY unimportable and DEFERRED
    stood in for meanwhile."""
    blocked = [m for m in UNUSED_LOCALLY if m not in sys.modules]
    for m in blocked:
        sys.modules[m] = None  # import raises ModuleNotFoundError, which Beam takes as "not installed"
    # Only modules that are installed: a missing one fails Beam's import as it would have.
    deferred = {m: _Deferred(m) for m in DEFERRED if m not in sys.modules and importlib.util.find_spec(m) is not None}
    for user, names in DEFERRED_NAMES.items():
        sources = {source for source, _, _ in names}
        if user not in sys.modules and not sources & set(sys.modules) and all(
                importlib.util.find_spec(m.partition(".")[0]) is not None for m in sources):
            deferred.update(_stand_ins(user, names))
    sys.modules.update(deferred)
    # io.mongodbio warns at import when it finds no bson; nothing else is logged at import.
    mongo_log = logging.getLogger("apache_beam.io.mongodbio")
    level = mongo_log.level
    mongo_log.setLevel(logging.ERROR)
    try:
        import apache_beam  # noqa: F401
    finally:
        mongo_log.setLevel(level)
        for m in blocked:
            if m in sys.modules and sys.modules[m] is None:
                del sys.modules[m]
        for m, stand_in in deferred.items():  # a later `import` gets the real module; Beam's modules keep theirs
            if sys.modules.get(m) is stand_in:
                del sys.modules[m]


def worker_import() -> None:
    """In a local worker process, before it imports Beam: lean if its launcher was."""
    if os.environ.get(LEAN_WORKERS_ENV) == "1" and "apache_beam" not in sys.modules:
        import_lean()
