"""An LSTM reading images row by row: a sequence task on real, offline data.

Each 8×8 digit becomes a sequence of 8 time steps of 8 pixels (the classic row-by-row MNIST
LSTM, at the size of the digits the toolkit ships); any image dataset works the same way
(height = time steps, width × channels = features). FLOPs are counted on an unrolled copy of
the model (TF's graph profiler sees a ``tf.while_loop`` body once)::

    python -m recipes.lstm
    python -m recipes.lstm --units=256 --batch_size=256 --use_synthetic_data \\
        --train_steps=50
    python -m recipes.lstm --dataset=tfds:mnist --image_size=28 \\
        --data_dir=~/tensorflow_datasets
    python -m recipes.lstm --smoke
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from toolkit import app
from toolkit.core import compat
from toolkit.data import catalog
from toolkit.runner import flags as tk_flags
from toolkit.runner.flags import Flag

if TYPE_CHECKING:  # the runner imports Keras: loaded when a task is built
    from toolkit.runner import train


def build_task(
    dataset: str = "digits",
    *,
    image_size: int = 8,
    channels: int = 1,
    num_classes: int = 10,
    units: Annotated[int, Flag("LSTM units.", lower_bound=1)] = 64,
    lstm_layers: Annotated[int, Flag("Stacked LSTM layers.", lower_bound=1)] = 1,
    learning_rate: float = 3e-3,
    data_dir: str | None = None,
    validation_fraction: float = 0.2,
    seed: int = 0,
) -> train.Task:
    """The row-by-row LSTM task; usable without flags (e.g. from a notebook). Its parameters are the
    recipe's flags (``tk_flags.define_task_flags`` below)."""
    from toolkit.runner import train

    keras = compat.keras()
    layers = keras.layers
    spec = catalog.ImageSpec(image_size, image_size, channels, num_classes)
    data = catalog.load(
        dataset, spec, data_dir=data_dir, validation_fraction=validation_fraction, seed=seed
    )

    def build_model(classes: int) -> Any:
        stack = [
            layers.LSTM(units, return_sequences=i < lstm_layers - 1) for i in range(lstm_layers)
        ]
        return keras.Sequential(
            [
                keras.Input(spec.shape),
                layers.Reshape((image_size, image_size * channels)),  # rows as time steps
                *stack,
                layers.Dense(classes, dtype="float32"),  # float32 logits
            ],
            name="lstm",
        )

    return train.classification_task("lstm", data, build_model, learning_rate)


tk_flags.define_task_flags(build_task, epochs=15, batch_size=32)
main = app.recipe_main(build_task)

if __name__ == "__main__":
    app.run(main)
