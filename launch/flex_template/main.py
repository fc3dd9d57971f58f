"""Entry point of the Flex Template image (FLEX_TEMPLATE_PYTHON_PY_FILE).

Dataflow's Flex Template launcher runs this file with Beam's flags (--runner,
--project, --region, --job_name, --staging_location, --temp_location,
--template_location, ...) and the template parameters, each as --name=value.
It builds the conversion and hands the job to the launcher, which submits it.
The launcher must get control back once the job is built, so this always runs
with --detach: the job's last step publishes the output and releases its lock.

What this adds to `python -m tfrecord_pipelines.convert`:
* parameters of on/off options arrive as --overwrite=true / --overwrite=false
  (what the console and the launch API send); argparse would refuse those, so
  they become --overwrite / nothing;
* an empty value for a number or a choice means "the default" and is dropped;
* --detach, and --runner DataflowRunner unless another runner is given;
* the workers' container: with no --sdk_container_image (or --setup_file),
  the image this runs in when build.sh baked its name in
  (TFRECORDS_SDK_CONTAINER_IMAGE), so workers run exactly the launcher's code
  and packages; failing that, --setup_file of the copy of setup.py in the image
  (workers then install the package at start-up).

The package is imported from site-packages (pip install . in the Dockerfile),
the same installation the workers use, never from a source tree.
"""
from __future__ import annotations

import argparse
import os
import sys

TRUE = {"true", "1", "yes", "on"}
FALSE = {"false", "0", "no", "off", ""}
IMAGE_ENV = "TFRECORDS_SDK_CONTAINER_IMAGE"
SETUP_ENV = "TFRECORDS_SETUP_FILE"
DEFAULT_SETUP_FILE = "/template/setup.py"


class TemplateArgError(ValueError):
    pass


def _option_kinds() -> tuple[set, set, set]:
    """(every conversion option, on/off options, options whose empty value means the default)."""
    from tfrecord_pipelines.options import help_parser
    names, switches, typed = set(), set(), set()
    for a in help_parser("flex-template")._actions:
        if not a.option_strings or not a.dest or a.dest == "help":
            continue
        names.add(a.dest)
        if isinstance(a, argparse._StoreTrueAction):  # pylint: disable=protected-access
            switches.add(a.dest)
        elif a.type in (int, float) or a.choices:
            typed.add(a.dest)
    return names, switches, typed


def _given(argv: list, *names: str) -> bool:
    return any(a == f"--{n}" or a.startswith(f"--{n}=") for a in argv for n in names)


def template_argv(argv: list, env=None) -> list:
    """The launcher's arguments, made into what tfrecord_pipelines.commands.convert.run takes."""
    env = os.environ if env is None else env
    _, switches, typed = _option_kinds()
    out: list = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--"):
            out.append(arg)
            continue
        name, eq, value = arg[2:].partition("=")
        if name in switches:
            if not eq and i < len(argv) and argv[i].strip().lower() in TRUE | FALSE - {""}:
                value, eq = argv[i], "="  # --overwrite true
                i += 1
            if not eq or value.strip().lower() in TRUE:
                out.append(f"--{name}")
            elif value.strip().lower() not in FALSE:
                raise TemplateArgError(f"--{name}={value}: expected true or false")
            continue
        if name in typed and eq and not value.strip():
            continue  # an empty field: keep the option's default
        out.append(arg)
    if not _given(out, "runner"):
        out.append("--runner=DataflowRunner")
    if not _given(out, "detach"):
        out.append("--detach")
    if not _given(out, "sdk_container_image", "worker_harness_container_image", "setup_file"):
        image = env.get(IMAGE_ENV, "").strip()
        setup = env.get(SETUP_ENV, "").strip() or DEFAULT_SETUP_FILE
        if image:
            out.append(f"--sdk_container_image={image}")
        elif os.path.exists(setup):
            out.append(f"--setup_file={setup}")
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = template_argv(argv)
    except TemplateArgError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # Only our own options: Beam's flags can name service accounts, keys and networks.
    ours = _option_kinds()[0]
    shown = [a for a in args if a.startswith("--") and a[2:].partition("=")[0] in ours]
    print("tfrecords flex template: converting with " + " ".join(shown), flush=True)
    from tfrecord_pipelines.commands.convert import run
    return run(args, prog="flex template")


if __name__ == "__main__":
    sys.exit(main())
