"""Writes metadata.json, the Flex Template's parameters, from the conversion
options in pipelines/options/table.py: one parameter per option, named like the flag
without its leading --, with the option's own help text, default, choices and
type, in the option's group.

    .venv/bin/python launch/flex_template/metadata.py           # rewrite metadata.json
    .venv/bin/python launch/flex_template/metadata.py --check   # exit 1 if it is stale

Run it after adding or changing an option; tests/e2e/test_dataflow.py fails while
metadata.json and the options disagree.

Values reach launch/flex_template/main.py as --name=value strings: on/off
options as true/false (main.py turns them into flags), numbers and choices as
text (an empty one means the default). Regexes reject malformed values when
the job is launched, before a launcher VM starts; they accept every value the
option parser accepts in its usual spelling, and the defaults.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
METADATA = os.path.join(HERE, "metadata.json")

NAME = "tfrecord-pipelines: images to TFRecord shards"
DESCRIPTION = ("Converts an image folder tree or a label table on Cloud Storage into deterministic TFRecord "
               "shards of tf.train.Example, with manifest.json, rejects.jsonl, label_map.json and schema.pbtxt. "
               "With versioned=true, output is a dataset root: each run writes a new version folder and moves "
               "<output>/LATEST to it once complete.")

# Options a template does not offer, and why (tests/e2e/test_dataflow.py reads this).
EXCLUDED = {
    "detach": "always on: a Flex Template launcher must return once the job is submitted, so main.py adds it",
    "progress": "the progress line of local runs; a Dataflow job shows the same figures as counters",
    "spill": "where a local run's metadata waits; a Dataflow job uses Dataflow's shuffle",
    "reader": "--for NAME only sets other options, which the template offers one by one",
}
REQUIRED = {"output"}

# Paths the workers read or write: Cloud Storage only (a local path would be on the launcher VM).
GCS_PATHS = {"input": "GCS_READ_FOLDER", "label_table": "GCS_READ_FILE", "image_root": "GCS_READ_FOLDER",
             "label_map": "GCS_READ_FILE", "output": "GCS_WRITE_FOLDER"}

NAME_RE = "[A-Za-z0-9_]{1,64}"
INT_RE = r"^\s*[-+]?[0-9]+\s*$"
FLOAT_RE = r"^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$"
BOOL_RE = "^(true|false)$"
REGEXES = {
    # tfrecord_pipelines.options.parse.parse_size: a number and an optional unit (B, KB, MB, GB, TB, KiB, ..., K, M, G)
    "shard_size": r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGTkmgt][iI]?[bB]|[KMGkmg]|[bB])?\s*$",
    # auto, N, or SPLIT=N,SPLIT=N
    "num_shards": rf"^\s*([Aa][Uu][Tt][Oo]|[0-9]+|{NAME_RE}\s*=\s*[0-9]+(\s*,\s*{NAME_RE}\s*=\s*[0-9]+)*\s*,?)?\s*$",
    # auto, folders, column, a split name, or NAME=FRACTION,...
    "split": rf"^\s*({NAME_RE}|{NAME_RE}\s*=\s*[0-9.eE+-]+(\s*,\s*{NAME_RE}\s*=\s*[0-9.eE+-]+)*\s*,?)\s*$",
    # tfrecord_pipelines.outputs.versions.VERSION_NAME, or empty for the UTC time
    "version": r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,127})?$",
}
LABELS = {
    "input": "Input folder (gs://)",
    "label_table": "Label table (gs://)",
    "image_root": "Image root folder (gs://)",
    "label_map": "Frozen label map (gs://)",
    "output": "Output folder (gs://)",
    "jpeg_quality": "JPEG quality",
    "exif_orientation": "EXIF orientation",
    "max_examples_per_split": "Max examples per split (trial run)",
}


def _parser() -> argparse.ArgumentParser:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tfrecord_pipelines.options import help_parser
    return help_parser("tfrecords convert")


def options() -> list[tuple[str, argparse.Action]]:
    """(group title, action) of every conversion option, in the parser's order."""
    out = []
    for group in _parser()._action_groups:  # pylint: disable=protected-access
        for a in group._group_actions:  # pylint: disable=protected-access
            if a.option_strings and a.dest != "help":
                out.append((group.title, a))
    return out


def text_default(a: argparse.Action) -> str:
    """The default as the launcher would pass it."""
    if isinstance(a, argparse._StoreTrueAction):  # pylint: disable=protected-access
        return "true" if a.default else "false"
    return "" if a.default is None else str(a.default)


def parameter(group: str, a: argparse.Action) -> dict:
    name = a.dest
    p = {"name": name, "label": LABELS.get(name, name.replace("_", " ").capitalize()), "helpText": a.help,
         "isOptional": name not in REQUIRED, "groupName": group[:1].upper() + group[1:]}
    if isinstance(a, argparse._StoreTrueAction):  # pylint: disable=protected-access
        p["paramType"], p["regexes"] = "BOOLEAN", [BOOL_RE]
    elif a.choices:
        p["paramType"] = "ENUM"
        p["enumOptions"] = [{"value": c} for c in a.choices]
        p["regexes"] = ["^(" + "|".join(a.choices) + ")$"]
    elif a.type in (int, float):
        p["paramType"], p["regexes"] = "NUMBER", [INT_RE if a.type is int else FLOAT_RE]
    elif name in GCS_PATHS:
        p["paramType"] = GCS_PATHS[name]
        p["regexes"] = [r"^gs://[^\n\r]+$" if name in REQUIRED else r"^(gs://[^\n\r]+)?$"]
    else:
        p["paramType"] = "TEXT"
        if name in REGEXES:
            p["regexes"] = [REGEXES[name]]
    default = text_default(a)
    if default and name not in REQUIRED:
        p["defaultValue"] = default
    return p


def metadata() -> dict:
    params = [parameter(g, a) for g, a in options() if a.dest not in EXCLUDED]
    return {"name": NAME, "description": DESCRIPTION, "streaming": False, "parameters": params}


def render() -> str:
    return json.dumps(metadata(), indent=2, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if metadata.json is not what this writes")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = open(METADATA, encoding="utf-8").read() if os.path.exists(METADATA) else ""
        if current != text:
            print(f"{METADATA} is stale: run python launch/flex_template/metadata.py", file=sys.stderr)
            return 1
        return 0
    with open(METADATA, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {METADATA}: {len(metadata()['parameters'])} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
