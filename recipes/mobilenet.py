"""MobileNetV2 (keras.applications, ``weights=None``: no download), any image dataset.

Depthwise-separable convolutions do few FLOPs per byte moved, so this recipe is the one where
achieved FLOP/s (and MFU) stay low even when the step is as fast as it gets: compare its report
with ResNet's. Defaults: the digits at 96×96 RGB (real, offline)::

    python -m recipes.mobilenet
    python -m recipes.mobilenet --dataset=synthetic --image_size=224 \\
        --batch_size=64 --train_steps=20 --alpha=1.0
    python -m recipes.mobilenet --dataset=folder:/data/flowers --image_size=160
    python -m recipes.mobilenet --smoke
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from toolkit import app
from toolkit.core import compat
from toolkit.data import catalog
from toolkit.runner import flags as tk_flags
from toolkit.runner.config import ConfigError
from toolkit.runner.flags import Flag

if TYPE_CHECKING:  # the runner imports Keras: loaded when a task is built
    from toolkit.runner import train


def build_task(
    dataset: str = "digits",
    *,
    image_size: int = 96,
    channels: int = 3,
    num_classes: int = 10,
    alpha: Annotated[float, Flag("Width multiplier (0.35, 0.5, 0.75, 1.0, 1.3, 1.4).")] = 0.5,
    learning_rate: float = 1e-3,
    data_dir: str | None = None,
    validation_fraction: float = 0.2,
    seed: int = 0,
) -> train.Task:
    """The MobileNetV2 task; usable without flags (e.g. from a notebook). Its parameters are the
    recipe's flags (``tk_flags.define_task_flags`` below)."""
    from toolkit.runner import train

    if image_size < 32:
        raise ConfigError(f"--image_size: MobileNetV2 needs >= 32, got {image_size}")
    keras = compat.keras()
    spec = catalog.ImageSpec(image_size, image_size, channels, num_classes)
    data = catalog.load(
        dataset, spec, data_dir=data_dir, validation_fraction=validation_fraction, seed=seed
    )

    def build_model(classes: int) -> Any:
        base = keras.applications.MobileNetV2(
            input_shape=spec.shape, alpha=alpha, include_top=False, weights=None, pooling="avg"
        )
        outputs = keras.layers.Dense(classes, dtype="float32")(base.output)  # float32 logits
        return keras.Model(base.input, outputs, name="mobilenet_v2")

    return train.classification_task("mobilenet", data, build_model, learning_rate)


tk_flags.define_task_flags(build_task, epochs=3, batch_size=32)
main = app.recipe_main(build_task)

if __name__ == "__main__":
    app.run(main)
