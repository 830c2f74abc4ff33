"""`python -m gpu_enricher`."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
