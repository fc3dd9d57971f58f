"""A runner named by module path (`--runner package.module.Runner`): its
module is imported before the flags are checked, so the options it declares
pass; a module that does not import, and a runner this pipeline cannot run
on (Beam's DaskRunner), are refused in one line saying why."""
from __future__ import annotations

import os
import sys
import textwrap

import pytest

from conftest import make_tree

RUNNER = textwrap.dedent('''
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner


    class ClusterOptions(PipelineOptions):
        @classmethod
        def _add_argparse_args(cls, parser):
            parser.add_argument("--cluster_address_{tag}", default="")


    class ClusterRunner(SwitchingDirectRunner):
        pass
    ''')


def test_a_runners_own_options_are_known_once_its_module_is_named(tmp_path, monkeypatch):
    from tfrecord_pipelines.options import FlagError, check_flags
    tag = os.urandom(4).hex()  # a module and a flag no earlier test registered
    (tmp_path / f"cluster_{tag}.py").write_text(RUNNER.replace("{tag}", tag))
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["--input", "in", "--output", "out", f"--cluster_address_{tag}", "127.0.0.1:8786"]
    with pytest.raises(FlagError, match=f"unknown flag --cluster_address_{tag}"):
        check_flags(argv)  # without the runner, nobody declares it
    check_flags(argv + ["--runner", f"cluster_{tag}.ClusterRunner"])
    check_flags(argv)  # once imported, as Beam itself then sees it
    monkeypatch.delitem(sys.modules, f"cluster_{tag}")

    with pytest.raises(FlagError, match=f"--runner cluster_{tag}.Nope: module cluster_{tag} has no Nope"):
        check_flags(argv + [f"--runner=cluster_{tag}.Nope"])
    with pytest.raises(FlagError, match=r"--runner no_such_pkg_x.Runner: its module no_such_pkg_x does not import "
                                        r"\(ModuleNotFoundError: No module named 'no_such_pkg_x'\); install"):
        check_flags(argv + ["--runner", "no_such_pkg_x.Runner"])


@pytest.mark.parametrize("runner", ["apache_beam.runners.dask.dask_runner.DaskRunner", "DaskRunner", "dask"])
def test_the_dask_runner_is_refused_saying_why(runner, tmp_path, capsys):
    from tfrecord_pipelines.commands.convert import run
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=1)
    assert run(["--input", root, "--output", out, "--runner", runner, "--dask_client_address", "127.0.0.1:8786"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: --runner {runner}: Beam's DaskRunner cannot run this pipeline: it hands every "
                          "consumer of a step's tagged outputs all of them mixed, computes only the last sink"), err
    assert not os.path.exists(out)
