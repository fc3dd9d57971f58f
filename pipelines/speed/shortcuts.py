"""Shortcuts past work Beam repeats for every transform of a pipeline.

Four things Beam redoes per transform, pipeline or bundle cost a small run a
fifth of its time:

- DoFn introspection: looking for state and timer parameters
  (userstate.get_dofn_specs), Beam takes `inspect.signature` of every method
  a DoFn has (~30, most of them DoFn's own) each time a ParDo is built,
  translated, and its bundle processor made, in the launcher and in every
  worker: ~12,000 signatures, ~0.3-0.5 s of a 100-image run. A function's
  arguments and defaults do not change while a pipeline is built and run, so
  Beam's `get_function_args_defaults` is remembered per function (for a bound
  method, its underlying function: the result does not depend on the
  instance). Other callables (partials, callable objects, builtins) are not
  remembered. The specs themselves depend only on the DoFn's class, and for
  a Map or FlatMap on the function it wraps, so they are remembered per
  class (and function); a DoFn holding other bound methods is asked afresh.
- Option views: `options.view_as(TypeOptions)` for every transform applied
  builds an argparse parser and parses the run's flags again (~300 views,
  ~0.2 s). A view holds nothing of its own (its values live in the options'
  shared dict), so a view of a class is made once per options object, and
  made again if the options' flags or values dict are replaced.
- Whether we run inside IPython: Beam asks as each transform is applied and
  as each pipeline runs, by importing IPython (~0.2-0.7 s where it is
  installed, as in most ML setups with Jupyter). A process inside IPython has
  imported it before any of our code ran, so where it is not imported the
  answer is no, without importing it.
- The end of a bundle: each bundle has a thread that samples which step
  runs (for Beam's msec counters), sleeping between samples for a period
  that grows from 2 ms to 200 ms, and the bundle's end waits for that sleep
  to finish. So a bundle of a few seconds ends with ~100 ms of idle wait on
  average. The period is capped at SAMPLING_MS; a wake-up costs microseconds.

The caches hold their keys weakly. Part of the speed layer
(pipelines/speed/__init__.py): install() returns the function that puts
Beam's own functions back.
"""
from __future__ import annotations

import sys
import types
import weakref

SAMPLING_MS = 5  # the state sampler's longest sleep (Beam's default: 200 ms)


def install():
    """Installs the shortcuts (the speed layer checked Beam's version);
    returns the function that removes them again."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.worker import statesampler
    from apache_beam.transforms import core
    from apache_beam.transforms import userstate
    from apache_beam import pipeline
    from apache_beam.utils import interactive_utils
    replaced = [(core, "get_function_args_defaults", remembered_arguments),
                (userstate, "get_dofn_specs", remembered_specs),
                (PipelineOptions, "view_as", remembered_views),
                # pipeline.py imported the name; the interactive labels ask the module's
                (pipeline, "is_in_ipython", ipython_imported_first),
                (interactive_utils, "is_in_ipython", ipython_imported_first),
                (statesampler, "StateSampler", quick_to_stop)]
    originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in replaced]
    for owner, name, make in replaced:
        setattr(owner, name, make(getattr(owner, name)))

    def uninstall() -> None:
        for owner, name, original in originals:
            setattr(owner, name, original)
    return uninstall


def remembered_arguments(compute):
    """`compute(f) -> (args, defaults)` remembered per plain or bound function;
    each call gets lists of its own, as from `compute`."""
    plain: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    bound: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def get_function_args_defaults(f):
        if isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
            cache, key = bound, f.__func__
        elif isinstance(f, types.FunctionType):
            cache, key = plain, f
        else:
            return compute(f)
        got = cache.get(key)
        if got is None:
            args, defaults = compute(f)
            got = cache[key] = (tuple(args), tuple(defaults))
        return list(got[0]), list(got[1])

    get_function_args_defaults.__wrapped__ = compute
    return get_function_args_defaults


def remembered_specs(compute):
    """`compute(dofn) -> (state specs, timer specs)` remembered per DoFn class,
    or for a DoFn that wraps a function (Map, FlatMap: Beam reads the wrapped
    function's arguments through an `_inspect_` hook) per class and function.
    Each call gets sets of its own."""
    by_class: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    by_function: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    hooked: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # class -> has an _inspect_ hook

    def key_of(dofn):
        held = getattr(dofn, "__dict__", None)
        if held is None:
            return None, None
        bound = [v for v in held.values() if isinstance(v, types.MethodType)]
        cls = type(dofn)
        if cls not in hooked:
            hooked[cls] = any(n.startswith("_inspect_") for n in dir(cls))
        if not hooked[cls]:
            return (by_class, cls) if not bound else (None, None)
        fn = held.get("_fn")
        f = fn.__func__ if isinstance(fn, types.MethodType) else fn
        if not isinstance(f, types.FunctionType) or any(b is not fn for b in bound):
            return None, None
        return by_function.setdefault(f, {}), cls

    def get_dofn_specs(dofn):
        cache, key = key_of(dofn)
        if cache is None:
            return compute(dofn)
        got = cache.get(key)
        if got is None:
            got = cache[key] = compute(dofn)
        return set(got[0]), set(got[1])

    get_dofn_specs.__wrapped__ = compute
    return get_dofn_specs


def remembered_views(make_view):
    """`options.view_as(cls)` made once per (options, cls) while the options
    keep their flags and values dict."""
    views: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def view_as(self, cls):
        try:
            mine = views.setdefault(self, {})
        except TypeError:  # not weakly referable
            return make_view(self, cls)
        view = mine.get(cls)
        if view is None or view._flags is not self._flags or view._all_options is not self._all_options:
            view = mine[cls] = make_view(self, cls)
        return view

    view_as.__wrapped__ = make_view
    view_as.__doc__ = make_view.__doc__
    return view_as


def ipython_imported_first(is_in_ipython):
    """Beam's is_in_ipython, asked only where IPython was imported."""
    def answer() -> bool:
        return "IPython" in sys.modules and is_in_ipython()

    answer.__wrapped__ = is_in_ipython
    return answer


def quick_to_stop(sampler_class):
    """Beam's StateSampler, sleeping at most SAMPLING_MS between samples."""
    class StateSampler(sampler_class):
        def __init__(self, prefix, counter_factory, sampling_period_ms=SAMPLING_MS):
            super().__init__(prefix, counter_factory, min(sampling_period_ms, SAMPLING_MS))

    StateSampler.__qualname__ = StateSampler.__name__ = sampler_class.__name__
    StateSampler.__module__ = sampler_class.__module__
    return StateSampler
