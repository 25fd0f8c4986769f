"""Operation micro-benchmarks and the XLA fusion demo (``python -m toolkit ops``).

:mod:`toolkit.bench.measure` times the seed post's ops in eager, graph and XLA mode on every device
(tables: :mod:`toolkit.bench.table`); :mod:`toolkit.bench.fusion` reads what fused in a matmul with
a ``hard_swish`` epilogue and in conv2d + bias + relu."""

__all__: list[str] = []  # a namespace: import the submodules (measure, table, fusion...)
