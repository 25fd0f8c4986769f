"""The measured answers: :mod:`~keras_perf.search.diagnose` (why is the step not faster),
:mod:`~keras_perf.search.tune` (which settings are faster here) and
:mod:`~keras_perf.search.chooser` (which backend), over one measured target
(:mod:`~keras_perf.search.workload`) and one framework-free engine
(:mod:`~keras_perf.search.engine`: the search, the head-to-head rounds, the never-slower choice).
Import the submodules directly; ``keras_perf.diagnose``, ``keras_perf.tune`` and
``keras_perf.autotune`` are the functions."""

__all__: list[str] = []  # a namespace of submodules
