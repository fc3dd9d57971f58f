"""tfrecord-pipelines: image datasets to deterministic TFRecord shards with Apache Beam.

From Python (the command's options as keywords; see README's quick start):

    import tfrecord_pipelines as tfp
    result = tfp.convert(input="images", output="out", num_shards=4)   # or label_table=a_dataframe
    ds = tfp.load("out", split="train", as_supervised=True)             # a tf.data.Dataset

In your own Beam pipeline: `tfp.ToRecords` and `tfp.WriteDataset`.

Importing this package imports neither Beam nor TensorFlow: each is imported
by the first call that needs it.
"""
import sys as _sys
import types as _types

from tfrecord_pipelines._version import __version__
from tfrecord_pipelines.transforms.core.errors import (ConversionError, OutputError, RunError,  # noqa: E402
                                                       UsageError, VerificationError)

# The API's functions, by the commands' names: `tfp.convert(...)` calls
# tfrecord_pipelines.api.convert. `tfrecord_pipelines.convert` is also a module
# (convert.py, for `python -m tfrecord_pipelines.convert`) that an import
# would make the package's attribute, so the package answers these names itself.
_COMMANDS = ("convert", "check", "verify", "report", "spec")
# name -> module holding it, imported on first use (PEP 562)
_LAZY = {
    "options_help": "api", "load": "api.load",
    "ConversionResult": "api.results", "CheckResult": "api.results", "VerifyResult": "api.results",
    "ReportResult": "api.results",
    "ToRecords": "api.ptransforms", "WriteDataset": "api.ptransforms", "beam_config": "api.ptransforms",
    "TooManyRejects": "transforms.stages.publish", "LockHeld": "transforms.storage.run_lock",
    "LockLost": "transforms.storage.run_lock", "TableError": "transforms.core.tables",
}

__all__ = ["__version__", "ConversionError", "OutputError", "RunError", "UsageError", "VerificationError",
           *_COMMANDS, *_LAZY]


class _ApiFunction:
    """api.NAME, imported on the first call (Beam with it); convert's and
    check's signature are their keywords, read from the flags' declarations."""

    def __init__(self, name: str):
        self.__name__ = self.__qualname__ = name
        self.__module__ = __name__

    def __call__(self, *args, **kwargs):
        from tfrecord_pipelines import api
        return getattr(api, self.__name__)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function tfrecord_pipelines.{self.__name__}>"

    @property
    def __doc__(self):
        from tfrecord_pipelines import api
        return getattr(api, self.__name__).__doc__

    @property
    def __signature__(self):
        import inspect

        from tfrecord_pipelines import api
        if self.__name__ in ("convert", "check"):
            from tfrecord_pipelines.options.keywords import signature
            return signature([inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d)
                              for n, d in (("progress", None), ("verbose", False))])
        return inspect.signature(getattr(api, self.__name__))


_FUNCTIONS = {name: _ApiFunction(name) for name in _COMMANDS}


class _Package(_types.ModuleType):
    def __getattribute__(self, name):
        if name in _COMMANDS:
            return _FUNCTIONS[name]
        return super().__getattribute__(name)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfrecord_pipelines' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"tfrecord_pipelines.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_COMMANDS))


_sys.modules[__name__].__class__ = _Package
