"""Training recipes: thin absl apps over ``toolkit.app``.

``--backend`` is read here, when the package is first imported and before any recipe imports
Keras, which fixes its backend at import.
"""

import sys

from toolkit import backend as _backend

try:
    _backend.from_argv(sys.argv)
except _backend.BackendError as _error:
    print(f"error: {_error}", file=sys.stderr)
    raise SystemExit(2) from None
