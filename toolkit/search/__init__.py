"""The measured answers: :mod:`~toolkit.search.diagnose` (why is the step not faster),
:mod:`~toolkit.search.tune` (which settings are faster here) and
:mod:`~toolkit.search.chooser` (which backend), over one measured target
(:mod:`~toolkit.search.workload`) and one framework-free engine
(:mod:`~toolkit.search.engine`: the search and the never-slower choice;
:mod:`~toolkit.search.rounds`: the head-to-head rounds).
Import the submodules directly; ``toolkit.diagnose``, ``toolkit.tune`` and
``toolkit.autotune`` are the functions."""

__all__: list[str] = []  # a namespace of submodules
