"""The measured answers: :mod:`~toolkit.search.diagnose` (why is the step not faster),
:mod:`~toolkit.search.tune` (which settings) and :mod:`~toolkit.search.chooser` (which backend),
over one measured target (:mod:`~toolkit.search.workload`) and a framework-free engine
(:mod:`~toolkit.search.engine`, :mod:`~toolkit.search.rounds`). Import the submodules directly;
``toolkit.diagnose``, ``toolkit.tune`` and ``toolkit.autotune`` are the functions."""

__all__: list[str] = []  # a namespace of submodules
