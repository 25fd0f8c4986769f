"""Your own code's shapes: whatever ``model.fit`` takes, ``diagnose``, ``tune``, ``profile()``
and ``doctor``/``backends --model_fn`` take too, each form a real fit on a real model."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from toolkit.data import _fit_data
from toolkit.runner.config import TrainConfig

N, D = 96, 8


@pytest.fixture(scope="module")
def keras():
    from toolkit.core import compat

    return compat.keras()


def _xy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32")


def _classifier(keras, inputs=1):
    ins = [keras.Input((D,), name=f"in{i}") for i in range(inputs)]
    joined = ins[0] if inputs == 1 else keras.layers.Concatenate()(ins)
    out = keras.layers.Dense(2)(keras.layers.Dense(8, activation="relu")(joined))
    model = keras.Model(ins if inputs > 1 else ins[0], out)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    return model


def _self_supervised(keras):
    """A model trained as ``fit(x)`` with no labels: its loss is its own (``add_loss``), as a
    VAE's or an autoencoder's."""

    class Reconstruction(keras.layers.Layer):
        def call(self, inputs):
            x, out = inputs
            self.add_loss(keras.ops.mean(keras.ops.square(x - out)))
            return out

    x = keras.Input((D,))
    out = keras.layers.Dense(D)(keras.layers.Dense(3)(x))
    model = keras.Model(x, Reconstruction()([x, out]))
    model.compile(optimizer="adam")
    return model


class Batches:
    """A ``keras.utils.PyDataset`` of (x, y) batches of 16, the way users write one."""

    def __new__(cls, keras, x, y):
        class _Batches(keras.utils.PyDataset):
            def __len__(self):
                return len(x) // 16

            def __getitem__(self, i):
                return x[i * 16 : (i + 1) * 16], y[i * 16 : (i + 1) * 16]

        return _Batches()


def _forms(keras):
    """(name, data as the user hands it to fit, model, examples per batch)."""
    import tensorflow as tf

    x, y = _xy()
    weights = np.linspace(0.5, 1.5, N).astype("float32")

    def generator():
        while True:
            for i in range(0, N, 16):
                yield x[i : i + 16], y[i : i + 16]

    return [
        ("tf.data", tf.data.Dataset.from_tensor_slices((x, y)).batch(24), _classifier(keras), 24),
        ("(x, y)", (x, y), _classifier(keras), 32),
        ("(x, y, sample_weight)", (x, y, weights), _classifier(keras), 32),
        ("x alone", x, _self_supervised(keras), 32),
        ("a dict of inputs", ({"in0": x, "in1": x * 2}, y), _classifier(keras, 2), 32),
        ("a list of inputs", ([x, x * 2], y), _classifier(keras, 2), 32),
        ("a PyDataset", Batches(keras, x, y), _classifier(keras), 16),
        ("a generator", generator(), _classifier(keras), 16),
    ]


def test_every_form_fit_takes_becomes_batches_that_train_and_read_again(keras):
    for name, data, model, batch in _forms(keras):
        dataset, said, size = _fit_data.fit_dataset(data)
        assert size == batch, (name, said)
        assert said.startswith(("your pipeline", "your arrays", "your _Batches", "your gen")), said
        # twice over: every measurement reads the data again, a generator's included
        model.fit(dataset.repeat(), steps_per_epoch=2 * (N // batch), epochs=1, verbose=0)
        first = next(iter(dataset))
        assert len(first) in (1, 2, 3), name
    x, y = _xy()
    dataset, said, _ = _fit_data.fit_dataset((x, y, np.ones(N, "float32")), batch_size=48)
    assert [len(b) for b in dataset] == [3, 3] and said.endswith("; (x, y, sample_weight)")
    with pytest.raises(ValueError, match=r"^data: a tuple is \(x, y\) or \(x, y, sample_weight\)"):
        _fit_data.fit_dataset((x, y, y, y))
    with pytest.raises(ValueError, match="^data: int is not something fit takes"):
        _fit_data.fit_dataset(3)
    with pytest.raises(ValueError, match="^labels: got 5 labels for 96 examples"):
        _fit_data.fit_dataset((x, y[:5]))
    with pytest.raises(ValueError, match="^data: sample_weight has 5 rows for 96 examples"):
        _fit_data.fit_dataset((x, y, y[:5]))


def test_a_torch_dataloader_is_read_again_on_every_pass(keras):
    torch = pytest.importorskip("torch")
    x, y = _xy()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=12
    )
    dataset, said, size = _fit_data.fit_dataset(loader)
    assert size == 12 and said.startswith("your DataLoader, read again")
    assert sum(1 for _ in dataset.repeat(2)) == 2 * N // 12


def test_diagnose_a_model_trained_on_x_alone(keras):
    """The keras-io VAE's shape: ``model.fit(x)``, no labels, its loss its own."""
    from toolkit.search import diagnose as dg

    x, _ = _xy()
    model = _self_supervised(keras)
    diagnosis = dg.diagnose(model, x, config=TrainConfig(batch_size=16), steps=6)
    assert diagnosis.batch_size == 16 and diagnosis.verdict in (
        dg.INPUT_BOUND,
        dg.COMPUTE_BOUND,
        dg.BALANCED,
        dg.UNCERTAIN,
    )
    assert diagnosis.pipeline.endswith("; x alone"), diagnosis.pipeline


def test_tune_a_model_on_its_pydataset_and_profile_one_fed_by_a_generator(
    keras, monkeypatch, tmp_path
):
    from toolkit import profile
    from toolkit.search import engine as en
    from toolkit.search import tune as tn

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    x, y = _xy()
    model = _classifier(keras)
    space = en.Space(jit_compile=(False,), steps_per_execution=(1, 2), fused_steps=(1,))
    result = tn.tune(
        model, Batches(keras, x, y), space=space, steps=8, progress=lambda line: None,
        use_cache=False,
    )  # fmt: skip
    assert [t.candidate.steps_per_execution for t in result.trials] == [1, 2]
    assert all(t.examples_per_sec for t in result.trials)

    def generator():
        for i in range(0, N, 16):
            yield x[i : i + 16], y[i : i + 16]

    with profile("generator-fed", report_dir=None, data=Batches(keras, x, y)) as prof:
        model.fit(generator(), steps_per_epoch=N // 16, verbose=0, callbacks=prof.callbacks)
    assert prof.report.steps.total_steps == N // 16
    assert prof.report.steps.batch_size == 16  # read from the PyDataset's first batch


MODEL_FN = """
import numpy as np
from toolkit.core import compat

def make():
    keras = compat.keras()

    class Reconstruction(keras.layers.Layer):
        def call(self, inputs):
            x, out = inputs
            self.add_loss(keras.ops.mean(keras.ops.square(x - out)))
            return out

    x = keras.Input((8,))
    model = keras.Model(x, Reconstruction()([x, keras.layers.Dense(8)(x)]))
    model.compile(optimizer="adam")
    return model, np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
"""


@pytest.mark.long
def test_doctor_and_backends_take_a_model_fn_whose_data_is_x_alone(tmp_path):
    (tmp_path / "selfsup.py").write_text(MODEL_FN)
    env = {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path / "cache"), "KERAS_BACKEND": ""}
    env.pop("KERAS_BACKEND")
    doctor = subprocess.run(
        [sys.executable, "-m", "toolkit", "doctor", "--model_fn", "selfsup:make",
         "--diagnose_steps=6", "--batch_size=32"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert doctor.returncode == 0, doctor.stderr[-3000:]
    assert "x alone" in doctor.stdout
    backends = subprocess.run(
        [sys.executable, "-m", "toolkit", "backends", "--model_fn", "selfsup:make",
         "--backends", "tensorflow", "--steps", "20", "--rounds", "1", "--no_plot",
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert backends.returncode == 0, backends.stderr[-3000:]
    assert "chosen: --backend=tensorflow" in backends.stdout
