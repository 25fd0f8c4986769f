"""Models and pipelines written as users write them (after Keras's own examples), with only
their data replaced by synthetic data of the same shapes: what ``benchmarks/own_models.py``
measures through ``--model_fn benchmarks._own_models:make_<name>``. Nothing here knows the
toolkit: each function returns ``(compiled model, batched tf.data pipeline)`` as a user's
module would. Keras 3 ops only, so each runs on every backend, except the GAN, whose
``train_step`` is TensorFlow's (``GradientTape``), as the Keras example writes it.
"""

from __future__ import annotations

import os

__all__ = ["MODELS", "TF_ONLY"]

# An epoch's batches: every model's pipeline holds this many (steps per epoch of the fit).
STEPS = int(os.environ.get("OWN_MODELS_STEPS", "200"))


def _keras():
    from toolkit.core import compat

    return compat.keras()


def _rng():
    import numpy as np

    return np.random.default_rng(0)


def make_gan():
    """A conditional GAN (keras.io/examples/generative/conditional_gan): subclassed, two
    sub-models, its own ``compile`` (two optimizers) and ``train_step``; never built."""
    import tensorflow as tf

    keras = _keras()
    latent, classes, batch = 32, 10, 64

    class ConditionalGAN(keras.Model):
        def __init__(self):
            super().__init__()
            self.generator = keras.Sequential(
                [keras.Input((latent + classes,)), keras.layers.Dense(128),
                 keras.layers.LeakyReLU(0.2), keras.layers.Dense(784, activation="sigmoid")]
            )  # fmt: skip
            self.discriminator = keras.Sequential(
                [keras.Input((784 + classes,)), keras.layers.Dense(128),
                 keras.layers.LeakyReLU(0.2), keras.layers.Dense(1)]
            )  # fmt: skip
            self.gen_loss = keras.metrics.Mean(name="generator_loss")
            self.disc_loss = keras.metrics.Mean(name="discriminator_loss")

        @property
        def metrics(self):
            return [self.gen_loss, self.disc_loss]

        def compile(self, d_optimizer, g_optimizer, loss_fn):
            super().compile()
            self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

        def train_step(self, data):
            images, labels = data
            one_hot = tf.one_hot(labels, classes)
            n = tf.shape(images)[0]
            noise = tf.random.normal((n, latent))
            fake = self.generator(tf.concat([noise, one_hot], 1))
            both = tf.concat([tf.concat([fake, one_hot], 1), tf.concat([images, one_hot], 1)], 0)
            truth = tf.concat([tf.ones((n, 1)), tf.zeros((n, 1))], 0)
            with tf.GradientTape() as tape:
                d_loss = self.loss_fn(truth, self.discriminator(both))
            w = self.discriminator.trainable_weights
            self.d_optimizer.apply_gradients(zip(tape.gradient(d_loss, w), w, strict=True))
            noise = tf.random.normal((n, latent))
            with tf.GradientTape() as tape:
                fake = self.generator(tf.concat([noise, one_hot], 1))
                g_loss = self.loss_fn(
                    tf.zeros((n, 1)), self.discriminator(tf.concat([fake, one_hot], 1))
                )
            w = self.generator.trainable_weights
            self.g_optimizer.apply_gradients(zip(tape.gradient(g_loss, w), w, strict=True))
            self.gen_loss.update_state(g_loss)
            self.disc_loss.update_state(d_loss)
            return {"g_loss": self.gen_loss.result(), "d_loss": self.disc_loss.result()}

    rng = _rng()
    x = rng.random((STEPS * batch, 784), dtype="float32")
    y = rng.integers(0, classes, STEPS * batch).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).batch(batch).prefetch(2)
    gan = ConditionalGAN()
    gan.compile(
        keras.optimizers.Adam(3e-4), keras.optimizers.Adam(3e-4),
        keras.losses.BinaryCrossentropy(from_logits=True),
    )  # fmt: skip
    return gan, data


def make_contrastive():
    """A SimCLR-style encoder (keras.io/examples/vision/semisupervised_simclr, reduced): two
    views of each example, an NT-Xent loss in its own ``compute_loss``; labels unused."""
    import tensorflow as tf

    keras = _keras()
    ops = keras.ops
    batch, features, temperature = 128, 64, 0.1

    class Contrastive(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder = keras.Sequential(
                [keras.Input((features,)), keras.layers.Dense(256, activation="relu"),
                 keras.layers.Dense(256, activation="relu"), keras.layers.Dense(64)]
            )  # fmt: skip

        def call(self, views):
            a, b = views
            return ops.concatenate([self.encoder(a), self.encoder(b)], axis=0)

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            z = y_pred / ops.maximum(ops.norm(y_pred, axis=1, keepdims=True), 1e-6)
            n = ops.shape(z)[0] // 2
            sim = ops.matmul(z, ops.transpose(z)) / temperature
            sim = sim - 1e9 * ops.eye(2 * n)
            targets = ops.concatenate([ops.arange(n, 2 * n), ops.arange(0, n)], axis=0)
            return ops.mean(
                keras.losses.sparse_categorical_crossentropy(targets, sim, from_logits=True)
            )

    rng = _rng()
    x = rng.normal(size=(STEPS * batch, features)).astype("float32")

    def views(v):
        return (v + tf.random.normal(tf.shape(v), stddev=0.1),
                v * tf.random.uniform(tf.shape(v), 0.8, 1.2))  # fmt: skip

    data = (
        tf.data.Dataset.from_tensor_slices(x).shuffle(2048).batch(batch, drop_remainder=True)
        .map(lambda v: (views(v),), num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)
    )  # fmt: skip
    model = Contrastive()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    return model, data


def make_mixup():
    """Mixup (keras.io/examples/vision/mixup): two shuffled, batched copies of the data,
    zipped, and a map mixing each pair of batches by a Beta-drawn weight; a small CNN."""
    import tensorflow as tf

    keras = _keras()
    batch = 64
    rng = _rng()
    x = rng.random((STEPS * batch, 28, 28, 1), dtype="float32")
    y = keras.utils.to_categorical(rng.integers(0, 10, STEPS * batch), 10).astype("float32")

    def one():
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).batch(batch)

    def mix_up(a, b, alpha=0.2):
        (xa, ya), (xb, yb) = a, b
        g1 = tf.random.gamma((tf.shape(xa)[0],), alpha)
        g2 = tf.random.gamma((tf.shape(xa)[0],), alpha)
        lam = g1 / (g1 + g2)
        return (xa * tf.reshape(lam, (-1, 1, 1, 1)) + xb * tf.reshape(1 - lam, (-1, 1, 1, 1)),
                ya * tf.reshape(lam, (-1, 1)) + yb * tf.reshape(1 - lam, (-1, 1)))  # fmt: skip

    data = tf.data.Dataset.zip((one(), one())).map(
        mix_up, num_parallel_calls=tf.data.AUTOTUNE
    ).prefetch(2)  # fmt: skip
    model = keras.Sequential(
        [keras.Input((28, 28, 1)), keras.layers.Conv2D(16, 3, activation="relu"),
         keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, activation="relu"),
         keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dropout(0.2),
         keras.layers.Dense(10, activation="softmax")]
    )  # fmt: skip
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    return model, data


def make_multi_input():
    """A functional model with two named inputs fed as a dict (an image and tabular
    features, keras.io/guides/functional_api's multi-input model), two outputs."""
    import tensorflow as tf

    keras = _keras()
    batch = 64
    image = keras.Input((32, 32, 3), name="image")
    meta = keras.Input((16,), name="meta")
    h = keras.layers.Conv2D(16, 3, strides=2, activation="relu")(image)
    h = keras.layers.GlobalAveragePooling2D()(h)
    m = keras.layers.Dense(32, activation="relu")(meta)
    joint = keras.layers.concatenate([h, m])
    priority = keras.layers.Dense(1, name="priority")(joint)
    department = keras.layers.Dense(4, name="department")(joint)
    model = keras.Model(
        {"image": image, "meta": meta}, {"priority": priority, "department": department}
    )
    model.compile(
        optimizer="rmsprop",
        loss={"priority": "mse",
              "department": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        loss_weights={"priority": 1.0, "department": 0.2},
    )  # fmt: skip
    rng = _rng()
    n = STEPS * batch
    features = {"image": rng.random((n, 32, 32, 3), dtype="float32"),
                "meta": rng.normal(size=(n, 16)).astype("float32")}  # fmt: skip
    targets = {"priority": rng.random((n, 1), dtype="float32"),
               "department": rng.integers(0, 4, n).astype("int32")}  # fmt: skip
    data = tf.data.Dataset.from_tensor_slices((features, targets)).batch(batch).prefetch(2)
    return model, data


def make_bilstm():
    """A bidirectional LSTM text classifier (keras.io/examples/nlp/bidirectional_lstm_imdb):
    an embedding, two stacked bidirectional LSTMs, a sigmoid."""
    import tensorflow as tf

    keras = _keras()
    batch, length, vocab = 32, 64, 20000
    model = keras.Sequential(
        [keras.Input((length,), dtype="int32"), keras.layers.Embedding(vocab, 64),
         keras.layers.Bidirectional(keras.layers.LSTM(32, return_sequences=True)),
         keras.layers.Bidirectional(keras.layers.LSTM(32)),
         keras.layers.Dense(1, activation="sigmoid")]
    )  # fmt: skip
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    rng = _rng()
    x = rng.integers(1, vocab, (STEPS * batch, length)).astype("int32")
    y = rng.integers(0, 2, STEPS * batch).astype("float32")
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).prefetch(2)


def make_vit():
    """A small vision transformer with augmentation layers in the model
    (keras.io/examples/vision/image_classification_with_vision_transformer, reduced):
    flip, rotation and zoom, patches by a strided convolution, two attention blocks."""
    import tensorflow as tf

    keras = _keras()
    layers = keras.layers
    batch, size, patch, dim = 64, 32, 4, 64
    augment = keras.Sequential(
        [layers.RandomFlip("horizontal"), layers.RandomRotation(0.02),
         layers.RandomZoom(0.2, 0.2)], name="data_augmentation",
    )  # fmt: skip
    inputs = keras.Input((size, size, 3))
    h = augment(inputs)
    h = layers.Conv2D(dim, patch, strides=patch)(h)
    h = layers.Reshape(((size // patch) ** 2, dim))(h)
    for _ in range(2):
        a = layers.LayerNormalization(epsilon=1e-6)(h)
        a = layers.MultiHeadAttention(num_heads=4, key_dim=dim // 4, dropout=0.1)(a, a)
        h = layers.Add()([a, h])
        m = layers.LayerNormalization(epsilon=1e-6)(h)
        m = layers.Dense(dim * 2, activation="gelu")(m)
        m = layers.Dense(dim)(m)
        h = layers.Add()([m, h])
    h = layers.GlobalAveragePooling1D()(layers.LayerNormalization(epsilon=1e-6)(h))
    outputs = layers.Dense(10)(layers.Dropout(0.3)(h))
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3, weight_decay=1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    rng = _rng()
    x = rng.random((STEPS * batch, size, size, 3), dtype="float32")
    y = rng.integers(0, 10, STEPS * batch).astype("int32")
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).prefetch(2)


MODELS = ("gan", "contrastive", "mixup", "multi_input", "bilstm", "vit")
TF_ONLY = frozenset({"gan"})  # its train_step is TensorFlow's, as the Keras example writes it
