"""`python -m luminal`: the same as the `luminal` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
