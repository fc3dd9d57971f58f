"""The command line's flags: ours (declared in table.py) beside Beam's own
(--runner, --direct_num_workers, --project, ...), which pass through to Beam;
a flag that neither we nor any Beam options class declares is an error."""
from __future__ import annotations

import argparse
import difflib
import re
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

from tfrecord_pipelines.transforms.core.errors import UsageError
from tfrecord_pipelines.options import table


class ConvertOptions(PipelineOptions):
    """Our options as Beam's PipelineOptions see them (a view of the command line)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        table.add_to(parser)


def add_convert_args(parser) -> None:
    """Every flag of `tfrecords convert` and `check`, in --help's groups."""
    table.add_to(parser)


class _HelpFormatter(argparse.HelpFormatter):
    """Shows "(default: X)" once: not for empty defaults or on/off flags, and
    not when the help text already says what the default is."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("(default" in text or not action.option_strings
                or action.default in ("", None, False, argparse.SUPPRESS)):
            return text
        return text + " (default: %(default)s)"


def help_parser(prog: str) -> argparse.ArgumentParser:
    """A parser holding only our flags, for --help (Beam's has hundreds)."""
    p = argparse.ArgumentParser(
        prog=prog, formatter_class=_HelpFormatter,
        description="Convert an image folder tree or a label table into deterministic, fixed-size TFRecord "
                    "shards of tf.train.Example.",
        epilog="--dry_run (Beam's flag): on a local run, say what the run would list, read, write, publish and "
               "remove, reading no image and locking and writing nothing; exit 1 if it says the run would be "
               "refused; with a remote runner, build the job without submitting it. "
               "Beam flags pass through, e.g. --runner (default: the local FnApiRunner, multi-process on all "
               "cores; DirectRunner means the same), --direct_num_workers N, --direct_running_mode "
               "in_memory|multi_processing, --runner DataflowRunner --project P --region R --temp_location "
               "gs://... --setup_file ./setup.py.")
    add_convert_args(p)
    return p


class FlagError(UsageError):
    """A flag nobody declares, or a bad value for a declared one."""


class _CheckingParser(_BeamArgumentParser):
    def error(self, message):
        raise FlagError(message)


def _all_options_parser() -> argparse.ArgumentParser:
    """Our flags and Beam's, as Beam itself collects them (PipelineOptions.get_all_options)."""
    parser = _CheckingParser(allow_abbrev=False, add_help=False)
    subset: dict = {}
    for cls in PipelineOptions.__subclasses__():
        subset.setdefault(str(cls), cls)
    for cls in subset.values():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser


# Runners this pipeline cannot run on, and why (each shown on a toy pipeline).
CANNOT_RUN_ON = {
    "daskrunner": "Beam's DaskRunner cannot run this pipeline: it hands every consumer of a step's tagged "
                  "outputs all of them mixed, computes only the last sink, and drops what finish_bundle emits "
                  "(records, rejects and counts would be wrong or missing); use DirectRunner here, or "
                  "FlinkRunner, SparkRunner or DataflowRunner on a cluster"}


def check_runner(runner: str) -> None:
    """A runner named by module path (`package.module.Runner`) is imported, so
    the options it declares are known to the flags' check; one this pipeline
    cannot run on is refused, saying why (FlagError)."""
    import importlib
    if not isinstance(runner, str) or not runner:
        return
    last = runner.rsplit(".", 1)[-1].lower()
    why = CANNOT_RUN_ON.get(last) or CANNOT_RUN_ON.get(last + "runner")
    if why:
        raise FlagError(f"--runner {runner}: {why}")
    if "." in runner:  # its module declares its options (Beam imports it only when it builds the runner)
        module, _, name = runner.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), name, None)
        except Exception as e:  # ImportError, or the module's own failure
            raise FlagError(f"--runner {runner}: its module {module} does not import ({type(e).__name__}: {e}); "
                            "install what it needs where you launch, or name a runner Beam knows "
                            "(e.g. DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, PortableRunner)") from None
        if found is None:
            raise FlagError(f"--runner {runner}: module {module} has no {name}")


def check_flags(argv: list, runner: str = "") -> None:
    """Raises FlagError for the first flag that neither we nor Beam declare
    (Beam would silently drop it: `--num_shard 4` would run with the default),
    with a suggestion, or for a bad value of a declared flag. `runner`: the
    run's --runner as the plan read it, else read here (check_runner)."""
    if not runner:
        given = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        given.add_argument("--runner", default="")
        runner = given.parse_known_args(argv)[0].runner
    check_runner(runner)
    parser = _all_options_parser()
    _, unknown = parser.parse_known_args(argv)
    _check_numbers(argv)
    if not unknown:
        return
    flag = next((a for a in unknown if a.startswith("-")), None)
    if flag is None:
        raise FlagError(f"unexpected argument {unknown[0]!r}: every value follows its flag (--name VALUE)")
    name = flag.split("=", 1)[0]
    ours = [a.option_strings[0] for a in help_parser("x")._actions if a.option_strings and a.dest != "help"]
    beams = [s for a in parser._actions for s in a.option_strings if s.startswith("--") and s not in ours]
    raise FlagError(f"unknown flag {name}{_suggestion(name, ours, beams)} (tfrecords convert --help lists ours; "
                    "Beam's own flags pass through)")


_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _check_numbers(argv: list) -> None:
    """Numbers of our flags by the strict grammar of labels (transforms/core/labels.py):
    argparse's int() and float() take `1_0` as 10 and `nan`, `inf`, ' 1'."""
    typed = {s: a.type for a in help_parser("x")._actions if a.type in (int, float) for s in a.option_strings}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag not in typed:
            continue
        if not eq:
            if i + 1 >= len(argv):
                continue  # argparse says the value is missing
            value = argv[i + 1]
        grammar = _INT if typed[flag] is int else _FLOAT
        if not grammar.fullmatch(value):
            kind = "an integer" if typed[flag] is int else "a number"
            raise FlagError(f"{flag} {value!r} is not {kind} (plain digits{'' if typed[flag] is int else ', . and e'})")


def _suggestion(name: str, ours: list, beams: list) -> str:
    underscored = "--" + name.lstrip("-").replace("-", "_")
    if underscored in ours or underscored in beams:
        return f": did you mean {underscored}? (flags are spelled with underscores)"
    best: Optional[list] = (difflib.get_close_matches(underscored, ours, n=1, cutoff=0.6)
                            or difflib.get_close_matches(underscored, beams, n=1, cutoff=0.75))
    return f": did you mean {best[0]}?" if best else ""


def values(argv: list) -> "table.Values":
    """Our options' values from the command line (check_flags has held it)."""
    return table.parse_known(argv)[0]
