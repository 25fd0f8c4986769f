"""Training recipes: thin absl apps over ``toolkit.app``.

TensorFlow's native log level is set and ``--backend`` is read here, when the package is first
imported and before any recipe imports Keras, which fixes its backend at import;
``--backend=auto`` becomes the winner that ``python -m toolkit backends`` measured for the
recipe and its flags on this machine.
"""

import sys

from toolkit.core import native_logs as _native_logs

# Before anything loads TensorFlow: its C++ start-up lines held back (TF_CPP_MIN_LOG_LEVEL=2,
# and lines held while it loads); a TF_CPP_MIN_LOG_LEVEL the user set, or --verbosity, wins.
_native_logs.configure(sys.argv[1:])

from toolkit import app as _app  # noqa: E402
from toolkit import backend as _backend  # noqa: E402
from toolkit.search import chooser as _chooser  # noqa: E402

try:
    # --help and --version read no cache, load nothing and say nothing else
    if not set(_app.INFO_FLAGS) & set(sys.argv[1:]):
        sys.argv[:] = _chooser.resolve_auto(sys.argv)  # --backend=auto: the measured winner
        _backend.from_argv(sys.argv)
        _backend.compile_cache_from_argv(sys.argv)  # before anything starts TensorFlow
except _backend.BackendError as _error:
    print(f"error: {_error}", file=sys.stderr)
    raise SystemExit(2) from None
