"""The options of a conversion: declared once (table.py), parsed from the
command line (flags.py, with Beam's own flags beside ours) or taken from
Python keywords (keywords.py), turned into the run's frozen config
(parse.py, config.py) from what one step read of the inputs before it
(resolve.py).

Importing this package imports no Beam: the run's plan reads the options
first (pipelines/run/plan.py). The command line's names live in flags.py, which
imports Beam, and are offered here on first use.
"""
_FLAGS = {"ConvertOptions", "FlagError", "add_convert_args", "add_detection_args", "check_flags", "help_parser",
          "LABEL_TYPES", "_all_options_parser"}


def __getattr__(name: str):
    if name in _FLAGS:
        from tfrecord_pipelines.options import flags
        return getattr(flags, name)
    raise AttributeError(f"module 'tfrecord_pipelines.options' has no attribute {name!r}")
