"""Tiny compiled models with their data, one per form of labels and weights ``fit`` takes
(``tests/test_data_forms.py``), at the top of an importable module so that ``tune(build)``'s
fresh processes can import each builder by name (``tests.data_forms_models:build_...``).

The multi-output model is the Keras functional API guide's ticket model (inputs ``title``,
``body`` and ``tags`` as a dict; outputs ``priority`` and ``department``; two losses with
``loss_weights``), shrunk: pooling for its LSTMs, so a fit compiles and steps in moments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EXAMPLES = 320
WORDS, TAGS, DEPARTMENTS, CLASSES, FEATURES = 50, 6, 4, 3, 8
# Every class weighed 0: the loss of a fit that applied them is 0, of one that did not, not.
ZERO_CLASS_WEIGHT = {c: 0.0 for c in range(CLASSES)}


def _keras() -> Any:
    from toolkit.core import compat

    return compat.keras()


def ticket_model(outputs: str = "dict") -> Any:
    """The guide's ticket model, compiled with its losses and ``loss_weights`` named by output
    (`outputs` ``"dict"``) or in the outputs' order (``"list"``)."""
    keras = _keras()
    title = keras.Input((None,), name="title", dtype="int32")
    body = keras.Input((None,), name="body", dtype="int32")
    tags = keras.Input((TAGS,), name="tags")
    pooled = [
        keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(WORDS, 8)(words))
        for words in (title, body)
    ]
    joined = keras.layers.concatenate([*pooled, tags])
    priority = keras.layers.Dense(1, name="priority")(joined)
    department = keras.layers.Dense(DEPARTMENTS, name="department")(joined)
    losses = {
        "priority": keras.losses.BinaryCrossentropy(from_logits=True),
        "department": keras.losses.CategoricalCrossentropy(from_logits=True),
    }
    weights = {"priority": 1.0, "department": 0.2}
    if outputs == "dict":
        out: Any = {"priority": priority, "department": department}
    else:
        out, losses, weights = [priority, department], list(losses.values()), [1.0, 0.2]
    model = keras.Model({"title": title, "body": body, "tags": tags}, out)
    model.compile(optimizer="rmsprop", loss=losses, loss_weights=weights)
    return model


def ticket_data(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(inputs, labels)``, each a dict keyed by the model's input and output names."""
    rng = np.random.default_rng(seed)
    x = {
        "title": rng.integers(WORDS, size=(EXAMPLES, 6)).astype("int32"),
        "body": rng.integers(WORDS, size=(EXAMPLES, 10)).astype("int32"),
        "tags": rng.integers(2, size=(EXAMPLES, TAGS)).astype("float32"),
    }
    y = {
        "priority": rng.random((EXAMPLES, 1)).astype("float32"),
        "department": np.eye(DEPARTMENTS, dtype="float32")[
            rng.integers(DEPARTMENTS, size=EXAMPLES)
        ],
    }
    return x, y


def classifier() -> Any:
    """A one-output classifier of :data:`CLASSES` classes (sparse labels)."""
    keras = _keras()
    model = keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(16, activation="relu"),
         keras.layers.Dense(CLASSES)]
    )  # fmt: skip
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def classifier_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(EXAMPLES, FEATURES)).astype("float32")
    return x, rng.integers(CLASSES, size=EXAMPLES).astype("int32")


# ---------------------------------------------------------------------------- builders
# The weighted forms weigh every example 0: a fit that applied the weights has a loss of 0,
# one that dropped them on the way does not (the tests read the loss of every fit).


def build_dict_labels() -> tuple[Any, Any]:
    """Labels as a dict, by output name: ``fit(x, {"priority": y1, "department": y2})``."""
    return ticket_model("dict"), ticket_data()


def build_list_labels() -> tuple[Any, Any]:
    """Labels as a list, in the outputs' order: ``fit(x, [y1, y2])``."""
    x, y = ticket_data()
    return ticket_model("list"), (x, [y["priority"], y["department"]])


def build_output_sample_weights() -> tuple[Any, Any]:
    """One sample_weight array per output, a dict as the labels are:
    ``fit(x, y, sample_weight={"priority": w1, "department": w2})``."""
    x, y = ticket_data()
    return ticket_model("dict"), (x, y, {name: np.zeros(EXAMPLES, "float32") for name in y})


def build_sample_weight() -> tuple[Any, Any]:
    """One weight per example: ``fit(x, y, sample_weight=w)``."""
    x, y = classifier_data()
    return classifier(), (x, y, np.zeros(EXAMPLES, "float32"))


def build_class_weight() -> tuple[Any, Any]:
    """The data of ``fit(x, y, class_weight=ZERO_CLASS_WEIGHT)``: the weights go beside it,
    as ``fit`` takes them (``tune(build_class_weight, class_weight=ZERO_CLASS_WEIGHT)``)."""
    return classifier(), classifier_data()
