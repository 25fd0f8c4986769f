"""``python -m toolkit <verb>``: see ``toolkit.cli`` for the verbs."""

import sys

from toolkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
