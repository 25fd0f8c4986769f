"""MLP on the UCI handwritten digits, with step-time profiling.

Trains a two-hidden-layer perceptron on the 8×8 digits that ship with the toolkit (real data,
offline), prints the step-time summary, and writes the report to ``runs/<timestamp>/``
(report.json, report.md, steps.png). The defaults reach >= 0.95 validation accuracy
(``make demo``)::

    python -m recipes.mlp
    python -m recipes.mlp --epochs=5 --batch_size=64 --steps_per_execution=8 \\
        --jit_compile
    python -m recipes.mlp --profile_steps=10,15 \\
        --report_dir=/tmp/runs
    python -m recipes.mlp --device=cpu --precision=mixed_bfloat16 \\
        --distribution_strategy=mirrored
    python -m recipes.mlp --dataset=tfds:mnist --image_size=28 \\
        --data_dir=~/tensorflow_datasets
    python -m recipes.mlp --use_synthetic_data  # input ~0: the step's bound
    python -m recipes.mlp --smoke               # a few seconds, for tests
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
    hidden_units: Annotated[int, Flag("Units in each hidden layer.", lower_bound=1)] = 128,
    learning_rate: float = 1e-3,
    data_dir: str | None = None,
    validation_fraction: float = 0.2,
    seed: int = 0,
) -> train.Task:
    """The MLP task; usable without flags (e.g. from a notebook). Its parameters are the
    recipe's flags (``tk_flags.define_task_flags`` below)."""
    from toolkit.runner import train

    keras = compat.keras()
    spec = catalog.ImageSpec(image_size, image_size, channels, num_classes)
    data = catalog.load(
        dataset, spec, data_dir=data_dir, validation_fraction=validation_fraction, seed=seed
    )

    def build_model(classes: int) -> Any:
        return keras.Sequential(
            [
                keras.Input(spec.shape),
                keras.layers.Flatten(),
                keras.layers.Dense(hidden_units, activation="relu"),
                keras.layers.Dense(hidden_units, activation="relu"),
                keras.layers.Dense(classes, dtype="float32"),  # float32 logits
            ],
            name="mlp",
        )

    return train.classification_task("mlp", data, build_model, learning_rate)


tk_flags.define_task_flags(build_task, epochs=20, batch_size=32)
main = app.recipe_main(build_task)

if __name__ == "__main__":
    app.run(main)
