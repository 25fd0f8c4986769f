"""The input ``fit`` reads, read as ``fit`` reads it: the shared half of the seam's ``fit_batches``.

A look-alike pipeline measures a different input (Keras's array adapter on TensorFlow, its NumPy
slicing on JAX, its DataLoader on PyTorch each run at their own rate), so the batches come from
Keras's own data adapter through the backend's own ``EpochIterator`` (TensorFlow's distributes the
dataset, JAX's puts batches on an accelerator one ahead), epoch after epoch, each ending in
``on_epoch_end`` (a ``PyDataset``'s workers stop there)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def read_as_fit(
    make_epochs: Callable[..., Any], take: Callable[[Any], Any], fit_data: dict[str, Any]
) -> tuple[str, Iterator[Any]]:
    """``(the adapter's class name, the batches one by one)``: `make_epochs(**kwargs)` is the
    backend's ``EpochIterator`` for `fit_data` (``fit``'s arguments), `take` what its train function
    does with each step's handout. Data of unknown length (a generator) is read once, the rest
    endlessly. Close the iterator when done (its ``finally`` ends the epoch for the adapter)."""
    epochs = make_epochs(**fit_data, steps_per_epoch=None, steps_per_execution=1)
    adapter = epochs.data_adapter
    once = adapter.num_batches is None

    def batches() -> Iterator[Any]:
        epochs.reset()
        ended = True
        try:
            while True:
                read, ended = 0, False
                with epochs.catch_stop_iteration():
                    for _, _, handed in epochs:
                        batch = take(handed)  # StopIteration at the end: caught by the with
                        read += 1
                        yield batch
                ended = True
                if once or not read:
                    return
        finally:
            if not ended:  # stopped mid-epoch: end it as fit would (stops a PyDataset's workers)
                adapter.on_epoch_end()

    return type(adapter).__name__, batches()
