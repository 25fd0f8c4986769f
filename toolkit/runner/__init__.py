"""The runner layer: ``config`` (TrainConfig), ``flags``, ``session`` (profile), ``train`` (run).

Import the submodules; the front, ``toolkit``, exports TrainConfig, Task, run and profile."""

__all__: list[str] = []  # a namespace of submodules
