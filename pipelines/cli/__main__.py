"""`python -m pipelines.cli`: the gpupipe command line."""
import sys

from pipelines.cli import main

sys.exit(main())
