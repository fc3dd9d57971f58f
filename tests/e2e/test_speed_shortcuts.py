"""Shortcuts past work Beam repeats per transform (pipelines/speed/shortcuts.py):
the same answers as Beam's own code, fresh lists each call, views that share
their options' values, a stateful DoFn that still keeps its state on the
runner while the shortcuts are installed, and Beam's own functions back once
they are removed."""
from __future__ import annotations


import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TypeOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core, userstate


from tfrecord_pipelines.speed import shortcuts as beam_shortcuts


def _beams_own(f):
    compute = core.get_function_args_defaults
    return getattr(compute, "__wrapped__", compute)(f)


class _Counting(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec("count", VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        yield kv[0], n


class _Plain(beam.DoFn):
    def process(self, x, side=beam.DoFn.SideInputParam, *rest):
        yield x


def test_arguments_are_beams_own_for_functions_bound_methods_and_state_params():
    memo = beam_shortcuts.remembered_arguments(_beams_own)
    for f in (lambda x, y=3: x, _Plain().process, _Counting().process, _Counting.process, len, str.upper):
        assert memo(f) == _beams_own(f), f
        assert memo(f) == _beams_own(f), f  # the remembered answer too


def test_each_call_gets_lists_of_its_own():
    memo = beam_shortcuts.remembered_arguments(_beams_own)
    args, defaults = memo(_Counting().process)
    args.append("spoiled")
    defaults.clear()
    assert memo(_Counting().process) == _beams_own(_Counting().process)


class _Holder:
    def counted(self, kv, count=beam.DoFn.StateParam(_Counting.COUNT)):
        yield kv

    def plain(self, x):
        yield x


def _specs(got) -> tuple:
    return tuple(sorted(spec.name for spec in s) for s in got)


def test_specs_are_beams_own_for_dofns_maps_and_bound_methods():
    beams_own = getattr(userstate.get_dofn_specs, "__wrapped__", userstate.get_dofn_specs)
    memo = beam_shortcuts.remembered_specs(beams_own)
    holder = _Holder()
    dofns = [_Counting(), _Plain(), beam.Map(lambda x: x).fn, beam.FlatMap(holder.counted).fn,
             beam.FlatMap(holder.plain).fn, beam.ParDo(_Counting()).fn]
    for _ in range(2):  # computed, then remembered
        assert [_specs(memo(d)) for d in dofns] == [_specs(beams_own(d)) for d in dofns] \
            == [(["count"], []), ([], []), ([], []), (["count"], []), ([], []), (["count"], [])]
    got = memo(_Counting())
    got[0].clear()  # each call's sets are its own
    assert _specs(memo(_Counting())) == (["count"], [])


def test_a_view_is_made_once_and_shares_the_options_values():
    made = []

    beams_own = getattr(PipelineOptions.view_as, "__wrapped__", PipelineOptions.view_as)

    def make_view(self, cls):
        made.append(cls)
        return beams_own(self, cls)

    view_as = beam_shortcuts.remembered_views(make_view)
    options = PipelineOptions(["--runner", "DirectRunner"])
    first = view_as(options, StandardOptions)
    assert view_as(options, StandardOptions) is first and made == [StandardOptions]
    view_as(options, TypeOptions).pipeline_type_check = False  # set through one view, seen by the options
    assert options.view_as(TypeOptions).pipeline_type_check is False
    assert first.runner == "DirectRunner"
    options._all_options = dict(options._all_options)  # values replaced: a view is made again
    assert view_as(options, StandardOptions) is not first and made == [StandardOptions, TypeOptions, StandardOptions]


def test_while_installed_a_stateful_dofn_keeps_its_state_on_the_runner():
    from apache_beam.runners.worker import statesampler
    before = (core.get_function_args_defaults, userstate.get_dofn_specs, PipelineOptions.view_as,
              statesampler.StateSampler)
    uninstall = beam_shortcuts.install()
    try:
        assert core.get_function_args_defaults is not before[0]
        assert userstate.is_stateful_dofn(_Counting()) and not userstate.is_stateful_dofn(_Plain())
        with TestPipeline(runner="FnApiRunner") as p:
            out = (p | beam.Create([("a", 1), ("a", 2), ("b", 3), ("a", 4)]) | beam.ParDo(_Counting())
                   | beam.combiners.Top.LargestPerKey(1) | beam.MapTuple(lambda k, v: (k, v[0])))
            assert_that(out, equal_to([("a", 3), ("b", 1)]))
    finally:
        uninstall()
    assert (core.get_function_args_defaults, userstate.get_dofn_specs, PipelineOptions.view_as,
            statesampler.StateSampler) == before


def test_a_run_does_not_import_ipython_to_learn_it_is_not_inside_it():
    """Beam asks `is_in_ipython()` for every transform applied, which imports IPython where it is
    installed (~0.2-0.7 s); with the shortcut a process that never imported it is answered no."""
    import subprocess
    import sys
    lean = ("import sys\n"
            "from tfrecord_pipelines.speed import lean_import\n"
            "lean_import.import_lean()\n"  # as the command line imports Beam (a whole import brings IPython itself)
            "import apache_beam as beam\n"
            "assert 'IPython' not in sys.modules\n")
    code = (lean + "from apache_beam import pipeline\n"
            "from apache_beam.utils import interactive_utils\n"
            "from tfrecord_pipelines.speed import shortcuts\n"
            "originals = (pipeline.is_in_ipython, interactive_utils.is_in_ipython)\n"
            "uninstall = shortcuts.install()\n"
            "with beam.Pipeline(runner='FnApiRunner') as p:\n"
            "    p | beam.Create([1, 2]) | beam.Map(lambda x: x)\n"
            "print('IPython' in sys.modules)\n"
            "uninstall()\n"
            "assert (pipeline.is_in_ipython, interactive_utils.is_in_ipython) == originals\n"
            "import IPython\n"  # imported: Beam's own answer (not inside a shell: False), asked through the shortcut
            "uninstall = shortcuts.install()\n"
            "print(pipeline.is_in_ipython() == originals[0]())\n"
            "uninstall()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
    plain = subprocess.run([sys.executable, "-c", lean + "with beam.Pipeline(runner='FnApiRunner') as p:\n"
                            "    p | beam.Create([1]) | beam.Map(lambda x: x)\n"
                            "print('IPython' in sys.modules)"], capture_output=True, text=True, timeout=300)
    assert plain.stdout.split() == ["True"]  # without the shortcut Beam imports it (it is installed here)
