"""tfrecord-pipelines: image datasets to deterministic TFRecord shards with Apache Beam.

From Python (the command's options as keywords; see README's quick start):

    import tfrecord_pipelines as tfp
    result = tfp.convert(input="images", output="out", num_shards=4)   # or label_table=a_dataframe
    ds = tfp.load("out", split="train", as_supervised=True)             # a tf.data.Dataset

In your own Beam pipeline: `tfp.ToRecords` and `tfp.WriteDataset`.

Importing this package imports neither Beam nor TensorFlow: each is imported
by the first call that needs it.
"""
__version__ = "0.1.0"

import sys as _sys  # noqa: E402
import types as _types  # noqa: E402

from tfrecord_pipelines.transforms.core.errors import (ConversionError, OutputError, RunError,  # noqa: E402
                                                       UsageError, VerificationError)

# The commands' modules (tfrecord_pipelines/convert.py, ...) are also the API's
# functions: `tfp.convert(...)` calls tfrecord_pipelines.api.convert, and
# `python -m tfrecord_pipelines.convert` is the command. A submodule's name is
# its package's attribute once imported, so the module itself is made callable.
_COMMANDS = ("convert", "check", "verify", "report", "spec")
# name -> module holding it, imported on first use (PEP 562)
_LAZY = {
    "options_help": "api", "load": "load",
    "ConversionResult": "results", "CheckResult": "results", "VerifyResult": "results", "ReportResult": "results",
    "ToRecords": "ptransforms", "WriteDataset": "ptransforms", "beam_config": "ptransforms",
    "TooManyRejects": "transforms.stages.publish", "LockHeld": "transforms.storage.run_lock",
    "LockLost": "transforms.storage.run_lock", "TableError": "transforms.core.tables",
}

__all__ = ["__version__", "ConversionError", "OutputError", "RunError", "UsageError", "VerificationError",
           *_COMMANDS, *_LAZY]


class _CommandModule(_types.ModuleType):
    """A command's module that, called, runs the API's function of its name."""

    def __call__(self, *args, **kwargs):
        from tfrecord_pipelines import api
        return getattr(api, self.__name__.rsplit(".", 1)[1])(*args, **kwargs)

    @property
    def __signature__(self):
        import inspect

        from tfrecord_pipelines import api
        name = self.__name__.rsplit(".", 1)[1]
        if name in ("convert", "check"):
            from tfrecord_pipelines.keywords import signature
            return signature([inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d)
                              for n, d in (("progress", None), ("verbose", False))])
        return inspect.signature(getattr(api, name))


class _Package(_types.ModuleType):
    def __getattribute__(self, name):
        if name in _COMMANDS:
            import importlib
            module = importlib.import_module(f"tfrecord_pipelines.{name}")
            if type(module) is _types.ModuleType:
                module.__class__ = _CommandModule
            return module
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
