"""What doctor, tune and backends measure when it is your code (``toolkit.verbs._target``, and
the app's own ``build_task``): a ``--model_fn`` that raises, returns the wrong thing, is not a
module's function or whose module raises on import, a ``build_task`` that raises, and your data
raising as it is measured or trained on (a PyDataset, a generator), each named as the user's in
one line. Real processes, as the user runs them."""

from __future__ import annotations

import os
import sys

import pytest

from tests.test_faults import FAILING_RECIPE, _last, _run

USER_MODULE = """
def raises():
    raise RuntimeError("the user's own bug\\nsecond line")

def returns_none():
    return None
"""


def test_a_model_fn_that_raises_is_named_in_one_line(tmp_path):
    """One line naming the function and its exception, status 1; --verbosity=1 puts the
    traceback above it (without it, none: the build_task case below)."""
    (tmp_path / "mf.py").write_text(USER_MODULE)
    args = [sys.executable, "-m", "toolkit", "doctor", "--model_fn", "mf:raises"]
    out = _run([*args, "--verbosity=1"], cwd=tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out) == (
        "error: --model_fn='mf:raises': raises() raised RuntimeError: the user's own bug; "
        "--verbosity=1 shows the traceback"
    )
    assert "Traceback (most recent call last)" in out.stderr


def test_a_model_fn_that_returns_the_wrong_thing_and_a_build_task_that_raises(
    tmp_path, monkeypatch
):
    from toolkit import app
    from toolkit.verbs import _target

    (tmp_path / "mf.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        app.UserCodeError, match=r"returns_none\(\) returned NoneType; it must"
    ) as e:
        _target.model_fn("mf:returns_none")
    # the data in any form --help names, not a batched dataset alone
    assert str(e.value).endswith(
        "(compiled_model, data), the data in any form fit takes: "
        "a batched tf.data dataset, (x, y) arrays, a PyDataset, a generator"
    )
    script = tmp_path / "broken_task.py"
    script.write_text(
        FAILING_RECIPE.replace(
            "def build_task():", "def build_task():\n    raise ValueError('bad shape')"
        )
    )  # a ValueError of yours is named as yours, not passed off as the toolkit's own line
    out = _run([sys.executable, str(script), "--smoke"], cwd=os.getcwd())
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out) == (
        "error: __main__.build_task() raised ValueError: bad shape; --verbosity=1 shows the "
        "traceback"
    )
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "spec", [".hidden:make", "..up:make", "/etc/passwd:make", "mf:make:x", "a b:make", "m:"]
)
def test_a_model_fn_that_is_not_a_modules_function_is_a_usage_error(spec, tmp_path):
    out = _run(
        [sys.executable, "-m", "toolkit", "tune", f"--model_fn={spec}", "--smoke"],
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert _last(out).startswith(f"error: tune: --model_fn={spec!r}: give module:function")


def test_a_model_fn_whose_module_raises_on_import_is_named_as_theirs(tmp_path):
    (tmp_path / "broken_mf.py").write_text("raise RuntimeError('boom at import')\n")
    out = _run(
        [sys.executable, "-m", "toolkit", "tune", "--model_fn=broken_mf:make", "--smoke"],
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out).startswith(
        "error: --model_fn='broken_mf:make': importing broken_mf raised RuntimeError: boom at"
    )


# ---------------------------------------------------------------------------- your data raising

RAISING_DATA = """
import numpy as np
import keras


class Rows(keras.utils.PyDataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i >= 2:
            raise KeyError("row 17 missing")
        return np.zeros((8, 8), "float32"), np.zeros((8, 1), "float32")


class PoolRows(Rows):  # read by a pool of worker processes: raised in one of them
    def __init__(self):
        super().__init__(workers=2, use_multiprocessing=True)


class FirstRow(Rows):  # a ValueError in the first batch, read as the data is first looked at
    def __getitem__(self, i):
        raise ValueError("bad first row")


def rows():
    for i in range(1000):
        if i == 3:
            raise ValueError("bad record at 3")
        yield np.zeros((8, 8), "float32"), np.zeros((8, 1), "float32")


def model():
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    m.compile(optimizer="sgd", loss="mse")
    return m


def make_pydataset():
    return model(), Rows()


def make_generator():
    return model(), rows()


def make_pool_pydataset():
    return model(), PoolRows()


def make_first_row():
    return model(), FirstRow()
"""


def _line_of(text: str, code: str) -> int:
    """The number of the line of `text` that holds `code` (as Python counts a module's)."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if code in line)


KEY_LINE = _line_of(RAISING_DATA, 'raise KeyError("row 17 missing")')
VALUE_LINE = _line_of(RAISING_DATA, 'raise ValueError("bad record at 3")')
KEY_ERROR = f"KeyError: 'row 17 missing' (raised in mydata.py:{KEY_LINE}, in __getitem__)"
VALUE_ERROR = f"ValueError: bad record at 3 (raised in mydata.py:{VALUE_LINE}, in rows)"
FIRST_LINE = _line_of(RAISING_DATA, 'raise ValueError("bad first row")')
FIRST_ERROR = f"ValueError: bad first row (raised in mydata.py:{FIRST_LINE}, in __getitem__)"


@pytest.mark.parametrize(
    ("verb", "function", "said"),
    [
        ("doctor", "make_pydataset", KEY_ERROR),
        ("tune", "make_generator", VALUE_ERROR),
        ("doctor", "make_pool_pydataset", KEY_ERROR),
        ("doctor", "make_first_row", FIRST_ERROR),
    ],
    ids=["doctor-pydataset", "tune-generator", "doctor-pool-pydataset", "doctor-first-row"],
)
def test_your_data_that_raises_is_said_as_your_exception_in_one_line(
    verb, function, said, tmp_path
):
    """A PyDataset whose ``__getitem__`` raises, a generator that raises: TensorFlow's
    tf.data runs them and wraps what they raise (UnknownError, InvalidArgumentError, the
    traceback in its message). The verb says the user's own exception, its message and line,
    as a failed run (status 1; your ValueError is no usage error): also where a pool of
    worker processes read it (the frame is in the pool's RemoteTraceback; the pool's workers,
    forked with the toolkit's handlers, once hung its join by ignoring its SIGTERM), and where
    the first batch, read as the data is first looked at, raised it."""
    (tmp_path / "mydata.py").write_text(RAISING_DATA)
    out = _run(
        [sys.executable, "-m", "toolkit", verb, f"--model_fn=mydata:{function}"],
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    assert _last(out) == f"error: {verb} stopped on {said}; --verbosity=1 shows the traceback"
    for wrapper in ("Traceback", "UnknownError", "InvalidArgumentError", "[[{{node"):
        assert wrapper not in out.stderr, out.stderr[-3000:]


def test_your_data_that_raises_in_a_fresh_process_on_jax_is_said_the_same(tmp_path):
    """On JAX the exception itself comes back (no tf.data around it); in the backends
    chooser's fresh process it is the run's error, said as in the parent process."""
    (tmp_path / "mydata.py").write_text(RAISING_DATA)
    out = _run(
        [sys.executable, "-m", "toolkit", "backends", "--model_fn=mydata:make_pydataset",
         "--backends=jax", "--rounds=1", "--steps=8", "--no_plot", f"--out={tmp_path / 'o'}"],
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    assert f"jax cpu: failed: {KEY_ERROR}" in out.stderr, out.stderr[-3000:]
    assert _last(out) == f"error: no backend ran ({KEY_ERROR})"
    assert "Traceback" not in out.stderr


GENERATOR_RECIPE = """
from absl import app
import numpy as np
from toolkit import app as tk_app
from toolkit.core import compat
from toolkit.runner import train
from toolkit.runner import flags as tk_flags

tk_flags.define_common_flags(epochs=1, batch_size=8)
keras = compat.keras()


def rows():
    for i in range(64):
        if i == 40:
            raise KeyError("row 17 missing")
        yield np.zeros(4, "float32"), np.int32(0)


def data():
    import tensorflow as tf

    spec = (tf.TensorSpec((4,), tf.float32), tf.TensorSpec((), tf.int32))
    return tf.data.Dataset.from_generator(rows, output_signature=spec)


def build_task():
    model = lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    return train.Task("gen", model, data, "sparse_categorical_crossentropy", train_examples=64)


app.run(tk_app.recipe_main(build_task))
"""


def test_a_recipe_whose_generator_raises_stops_on_your_exception(tmp_path):
    """A recipe of yours reading a generator that raises mid-epoch: the partial summary, then
    one line with your exception and its line, not TensorFlow's error around it."""
    (tmp_path / "genrecipe.py").write_text(GENERATOR_RECIPE)
    line = _line_of(GENERATOR_RECIPE, 'raise KeyError("row 17 missing")')
    out = _run(
        [sys.executable, "genrecipe.py", f"--report_dir={tmp_path / 'runs'}"],
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    last = _last(out)
    assert last.startswith(
        "error: training stopped on KeyError: 'row 17 missing' (raised in genrecipe.py:"
        f"{line}, in rows) (the partial report is in {tmp_path / 'runs'}"
    ), last
    assert "Traceback" not in out.stderr and "UnknownError" not in out.stderr


def test_in_python_your_exception_comes_through_as_keras_raises_it(tmp_path, monkeypatch, keras):
    """From Python, ``toolkit.diagnose`` and a ``StepTimer`` in your fit let the exception
    through as Keras's fit raises it (on TensorFlow its wrapper, with your traceback in its
    message): nothing is swallowed or renamed. ``user_raise`` reads yours back from it."""
    import toolkit
    from toolkit.core.errors import one_line, user_raise

    (tmp_path / "mydata.py").write_text(RAISING_DATA)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import mydata

    raised = {}
    for how in ("fit", "timed", "diagnose"):
        model = mydata.model()
        with pytest.raises(Exception) as caught:
            if how == "diagnose":
                toolkit.diagnose(model, mydata.Rows(), steps=5)
            else:
                timer = [toolkit.StepTimer(batch_size=8)] if how == "timed" else []
                model.fit(mydata.Rows(), epochs=1, verbose=0, callbacks=timer)
        raised[how] = caught.value
    assert len({type(e) for e in raised.values()}) == 1, raised
    for error in raised.values():
        assert str(user_raise(error)) == KEY_ERROR
        assert one_line(error) == "KeyError: 'row 17 missing'"


def test_an_error_of_the_toolkit_s_own_is_not_said_as_yours():
    """The deepest frame decides: the toolkit's own check raising is the toolkit's line; an
    exception raised here (not a library, not the toolkit) is the caller's."""
    from toolkit.core.checks import check_number
    from toolkit.core.errors import user_raise

    with pytest.raises(ValueError) as ours:
        check_number("--steps", -1, integer=True, least=1)
    assert user_raise(ours.value) is None
    with pytest.raises(KeyError) as yours:
        {}["row"]
    found = user_raise(yours.value)
    assert found is not None and found.type == "KeyError" and found.function.startswith("test_")
    assert os.path.abspath(found.file) == os.path.abspath(__file__)
    assert str(found).startswith("KeyError: 'row' (raised in ")
