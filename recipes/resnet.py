"""ResNets: CIFAR-style ResNet-20/32/56 at 32×32, and ResNet-50 (keras.applications,
``weights=None``, no download) at 224×224.

The CIFAR networks follow He et al. (2016), section 4.2: a 3×3 stem of 16 filters, three stages
of ``(depth - 2) / 6`` basic blocks with 16, 32 and 64 filters (stride 2 between stages,
1×1 projection shortcuts), global average pooling and a linear classifier. The default data are
the digits at 32×32 with grey repeated over RGB (real, offline); ``--dataset=synthetic``
measures the model alone::

    python -m recipes.resnet                   # ResNet-20 on digits
    python -m recipes.resnet --model=resnet56 --dataset=tfds:cifar10 \\
        --data_dir=~/tfds
    python -m recipes.resnet --model=resnet50 --dataset=synthetic \\
        --batch_size=64 --train_steps=20 --precision=mixed_bfloat16 \\
        --jit_compile
    python -m recipes.resnet --smoke
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

MODELS = ("resnet20", "resnet32", "resnet56", "resnet110", "resnet50")


def cifar_resnet(keras: Any, input_shape: tuple[int, ...], depth: int, classes: int) -> Any:
    """ResNet-`depth` for small images (depth = 6n + 2), as a functional Keras model."""
    if (depth - 2) % 6:
        raise ConfigError(f"--model: a CIFAR ResNet's depth must be 6n + 2, got {depth}")
    layers = keras.layers
    blocks = (depth - 2) // 6

    def conv_bn(x: Any, filters: int, kernel: int, stride: int = 1) -> Any:
        x = layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False)(x)
        return layers.BatchNormalization(momentum=0.9)(x)

    inputs = keras.Input(input_shape)
    x = layers.ReLU()(conv_bn(inputs, 16, 3))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            y = layers.ReLU()(conv_bn(x, filters, 3, stride))
            y = conv_bn(y, filters, 3)
            if stride != 1 or shortcut.shape[-1] != filters:
                shortcut = conv_bn(shortcut, filters, 1, stride)
            x = layers.ReLU()(layers.Add()([y, shortcut]))
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(classes, dtype="float32")(x)  # float32 logits
    return keras.Model(inputs, outputs, name=f"resnet{depth}")


def build_task(
    dataset: str = "digits",
    *,
    image_size: Annotated[
        int | None,
        Flag(
            "Height and width the images are resized to (default: the model's own).", lower_bound=8
        ),
    ] = None,
    channels: int = 3,
    num_classes: int = 10,
    model: Annotated[str, Flag("Which ResNet.", choices=MODELS)] = "resnet20",
    learning_rate: float = 1e-3,
    data_dir: str | None = None,
    validation_fraction: float = 0.2,
    seed: int = 0,
) -> train.Task:
    """The ResNet task; usable without flags (e.g. from a notebook). Its parameters are the
    recipe's flags (``tk_flags.define_task_flags`` below)."""
    from toolkit.runner import train

    if model not in MODELS:
        raise ConfigError(f"--model must be one of {', '.join(MODELS)}, got {model!r}")
    keras = compat.keras()
    size = image_size or (224 if model == "resnet50" else 32)
    if model == "resnet50" and size < 32:
        raise ConfigError(f"--image_size: ResNet-50 needs >= 32, got {size}")
    spec = catalog.ImageSpec(size, size, channels, num_classes)
    data = catalog.load(
        dataset, spec, data_dir=data_dir, validation_fraction=validation_fraction, seed=seed
    )

    def build_model(classes: int) -> Any:
        if model != "resnet50":
            return cifar_resnet(keras, spec.shape, int(model[len("resnet") :]), classes)
        base = keras.applications.ResNet50(
            weights=None, include_top=False, input_shape=spec.shape, pooling="avg"
        )
        outputs = keras.layers.Dense(classes, dtype="float32")(base.output)
        return keras.Model(base.input, outputs, name="resnet50")

    return train.classification_task(model, data, build_model, learning_rate)


tk_flags.define_task_flags(build_task, epochs=5, batch_size=32)
main = app.recipe_main(build_task)

if __name__ == "__main__":
    app.run(main)
