"""`python -m tritonpipeline.cli`: the `tritonpipeline` console script."""

import sys

from . import main

sys.exit(main())
