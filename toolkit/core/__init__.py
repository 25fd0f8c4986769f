"""The bottom layer, pure Python: the environment and the machine (``compat``, ``machine``),
atomic files and the one keyed cache (``files``, ``cache``), one-line errors (``errors``),
progress on stderr (``progress``), and the step statistics and the callbacks' shared state
(``stats``, ``events``). Nothing here imports a framework; everything else may import it."""

__all__: list[str] = []  # a namespace of submodules
