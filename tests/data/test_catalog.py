"""Datasets by name: every kind yields examples of the model's spec; bad names and paths fail
early with one line naming the flag."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from toolkit.data import catalog, sources, write_tfrecords

IMAGE = catalog.ImageSpec(12, 12, 3, num_classes=10)
TOKENS = catalog.TokenSpec(seq_len=40, vocab_size=100, num_classes=2)


def _check(ds, spec):
    features, label = ds.element_spec
    assert tuple(features.shape) == spec.shape and label.dtype == tf.int32
    assert features.dtype == (tf.int32 if isinstance(spec, catalog.TokenSpec) else tf.float32)
    examples = list(ds.take(5).as_numpy_iterator())
    assert examples
    for x, _y in examples:
        if isinstance(spec, catalog.TokenSpec):
            assert x.min() >= 0 and x.max() < spec.vocab_size and x[0] == catalog.CLS
        else:
            assert x.min() >= 0.0 and x.max() <= 1.0
    return examples


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("synthetic", ("synthetic", "")),
        ("digits", ("digits", "")),
        ("tfds:mnist", ("tfds", "mnist")),
        ("folder:/data/x", ("folder", "/data/x")),
        ("tfrecord:/d/*.tfrecord", ("tfrecord", "/d/*.tfrecord")),
    ],
)
def test_parse_accepts_the_documented_forms(spec, expected):
    assert catalog.parse_dataset_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("imagenet", "unknown dataset 'imagenet'"),
        ("tfds:", "give tfds:NAME"),
        ("digits:extra", "takes no ':' argument"),
        ("", "unknown dataset ''"),
    ],
)
def test_parse_rejects_with_the_accepted_forms(spec, words):
    with pytest.raises(ValueError, match="--dataset") as e:
        catalog.parse_dataset_spec(spec)
    assert words in str(e.value)


@pytest.mark.parametrize("spec", [IMAGE, TOKENS])
def test_synthetic_has_the_spec_and_no_validation(spec):
    data = catalog.load("synthetic", spec)
    _check(data.train(), spec)
    assert data.validation is None and data.num_classes == spec.num_classes


def test_digits_as_images_resized_and_split():
    data = catalog.load("digits", IMAGE, validation_fraction=0.25)
    _check(data.train(), IMAGE)
    train_n = sum(1 for _ in data.train())
    val_n = sum(1 for _ in data.validation())
    assert (train_n + val_n, data.num_classes, data.cache) == (1797, 10, True)
    assert abs(val_n - 0.25 * 1797) <= 1


def test_digits_as_tokens_are_cls_plus_pixel_intensities():
    data = catalog.load("digits", catalog.TokenSpec(70, 32))
    (x, _), *_ = _check(data.train(), catalog.TokenSpec(70, 32))
    assert x[0] == catalog.CLS and (x[1:65] >= catalog.FIRST_TOKEN).all()
    assert (x[65:] == catalog.PAD).all() and x[1:65].max() <= catalog.FIRST_TOKEN + 16
    with pytest.raises(ValueError, match="vocab_size >= 19"):
        catalog.load("digits", catalog.TokenSpec(70, 10))


def test_tfds_images_and_text_under_mock_data():
    with tfds.testing.mock_data(num_examples=12):
        images = catalog.load("tfds:mnist", IMAGE)
        _check(images.train(), IMAGE)
        _check(images.validation(), IMAGE)
        assert images.num_classes == 10 and "tfds:mnist" in images.description
        text = catalog.load("tfds:imdb_reviews", TOKENS)
        _check(text.train(), TOKENS)
        assert text.num_classes == 2


def test_unknown_tfds_name_fails_before_reading():
    with pytest.raises(ValueError, match="unknown TFDS dataset"):
        catalog.load("tfds:no_such_set", IMAGE)


def test_folder_holds_out_every_kth_image(image_dir):
    data = catalog.load(f"folder:{image_dir}", IMAGE, validation_fraction=0.25)
    assert data.num_classes == 3 and "12 images in 3 classes" in data.description
    train = _check(data.train(), IMAGE)
    val = list(data.validation().as_numpy_iterator())
    assert len(val) == 3 and sum(1 for _ in data.train()) == 9
    train_all = list(data.train().as_numpy_iterator())
    for x, _ in val:  # disjoint: no held-out image is also a training image
        assert not any(np.array_equal(x, t) for t, _ in train_all)
    assert train


def test_folder_for_a_token_model_and_missing_paths_are_clear(tmp_path, image_dir):
    with pytest.raises(ValueError, match="reads token sequences"):
        catalog.load(f"folder:{image_dir}", TOKENS)
    with pytest.raises(FileNotFoundError, match="--dataset=folder:.*no such directory"):
        catalog.load(f"folder:{tmp_path / 'nope'}", IMAGE)
    with pytest.raises(FileNotFoundError, match="no files match"):
        catalog.load(f"tfrecord:{tmp_path}/*.tfrecord", IMAGE)


def test_training_files_counts_and_refuses_as_load_does(tmp_path, image_dir):
    """The check a recipe runs before any framework loads: the count ``load`` trains on, the
    same errors for the same files, and None for a dataset that is not files."""
    for spec in ("synthetic", "digits", "tfds:mnist", "imagenet"):
        assert catalog.training_files(spec) is None  # the run's load says what is wrong
    folder = f"folder:{image_dir}"
    for fraction in (0.25, 0.5):
        load = catalog.load(folder, IMAGE, validation_fraction=fraction)
        assert catalog.training_files(folder, fraction) == load.train_examples
    x = np.zeros((23, *IMAGE.shape), "float32")
    write_tfrecords(tmp_path / "rec", x, np.arange(23) % 10, num_shards=2)
    records = f"tfrecord:{tmp_path}/rec/*.tfrecord"
    assert catalog.training_files(records) == catalog.load(records, IMAGE).train_examples == 18
    for spec, error in [
        (f"folder:{tmp_path / 'nope'}", FileNotFoundError),
        (f"tfrecord:{tmp_path}/none/*.tfrecord", FileNotFoundError),
        ("folder:", ValueError),
    ]:
        with pytest.raises(error) as checked:
            catalog.training_files(spec)
        with pytest.raises(error) as loaded:
            catalog.load(spec, IMAGE)
        assert str(checked.value) == str(loaded.value)
    with pytest.raises(ValueError, match="--validation_fraction"):
        catalog.training_files(folder, 1.0)


def test_tfrecords_of_the_spec_and_a_shape_mismatch(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((20, *IMAGE.shape)).astype("float32")
    write_tfrecords(tmp_path / "ok", x, np.arange(20) % 10, num_shards=2)
    data = catalog.load(f"tfrecord:{tmp_path}/ok/*.tfrecord", IMAGE, validation_fraction=0.2)
    _check(data.train(), IMAGE)
    assert sum(1 for _ in data.train()) == 16 and sum(1 for _ in data.validation()) == 4
    write_tfrecords(tmp_path / "bad", x[:, :5, :5], np.arange(20) % 10, num_shards=1)
    bad = catalog.load(f"tfrecord:{tmp_path}/bad/*.tfrecord", IMAGE)
    with pytest.raises(ValueError, match=r"hold 75 feature values, the model takes 12×12×3"):
        bad.train()


def test_a_bad_validation_fraction_names_the_flag():
    with pytest.raises(ValueError, match="--validation_fraction"):
        catalog.load("digits", IMAGE, validation_fraction=1.5)


def test_digits_are_the_packaged_1797_split_by_class_the_same_way_for_a_seed():
    (x_tr, y_tr), (x_va, y_va) = sources.digits(0.2, seed=3)
    assert (len(x_tr), len(x_va)) == (1437, 360)  # ceil(0.2 × 1797) held out
    assert x_tr.dtype == np.float32 and y_tr.dtype == np.int32 and x_tr.shape[1] == 64
    assert x_tr.min() >= 0.0 and x_tr.max() == 1.0
    # each class keeps its share on both sides, within the one example rounding gives
    whole = np.bincount(np.concatenate([y_tr, y_va]), minlength=10)
    assert np.abs(np.bincount(y_va, minlength=10) - whole * 360 / 1797).max() < 1
    assert np.any(np.diff(y_va) != 0) and np.any(np.diff(y_tr) < 0)  # shuffled, not by class
    (again, _), _ = sources.digits(0.2, seed=3)
    (other, _), _ = sources.digits(0.2, seed=4)
    assert np.array_equal(again, x_tr) and not np.array_equal(other, x_tr)


def test_stratified_split_covers_every_index_once_and_refuses_an_empty_side():
    labels = np.array([0] * 7 + [1] * 3 + [2] * 1)
    train, val = sources._stratified_split(labels, 0.3, seed=0)
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(11))
    # 4 held out: 2.55, 1.09 and 0.36 by share, the fourth to the largest remainder
    assert len(val) == 4 and np.bincount(labels[val], minlength=3).tolist() == [3, 1, 0]
    with pytest.raises(ValueError, match="leaves an empty side"):
        sources._stratified_split(labels, 0.999)
