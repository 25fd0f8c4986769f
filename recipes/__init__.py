"""Training recipes: thin absl apps over ``toolkit.app``, run as ``python -m recipes.NAME``.

Importing this package (or a recipe) changes nothing and loads no framework: a recipe's start-up
(TensorFlow's log level, ``--backend`` before Keras loads, ``--backend=auto`` as measured,
``--compile_cache``) is ``toolkit.app.start``, which ``toolkit.app.run`` calls first thing, as
``python -m toolkit`` does for its verbs.
"""

from toolkit.core import interrupts as _interrupts

if _interrupts.starting("recipes"):  # python -m recipes.NAME: Ctrl-C from the first import on
    _interrupts.install(early=True)
    from toolkit import app as _app

    _app.check_started_recipe()  # a misspelled NAME: one line listing the recipes
