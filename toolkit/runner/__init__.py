"""The runner layer: how to train (``config``: TrainConfig, the one table of settings and the one
validator), the shared flags (``flags``), ``profile()`` (``session``: callbacks → a report that
always lands), and the one runner (``train``). Import the submodules directly; the package's
front, ``toolkit``, exports ``TrainConfig``, ``Task``, ``run`` and ``profile``."""

__all__: list[str] = []  # a namespace of submodules
