"""Operation micro-benchmarks and the XLA fusion demo (``python -m toolkit ops``).

* :func:`toolkit.bench.measure.benchmark` times the seed post's 21 operations (Argmax ... SumAll)
  in eager, graph (``tf.function``) and XLA (``jit_compile=True``) mode on every device found,
  and returns a :class:`toolkit.bench.table.OpTable`: the seed's detailed and per-operation
  average tables as Markdown and CSV, a bar chart, and a JSON record with the environment.
* :mod:`toolkit.bench.fusion` times a matmul with a ``hard_swish`` epilogue (the TVM post's
  M, N, K = 128, 3072, 768) and conv2d + bias + relu, and reads what fused from the post-Grappler
  graphs and XLA's optimized HLO."""

__all__: list[str] = []  # a namespace: import the submodules (measure, table, fusion...)
