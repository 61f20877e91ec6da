"""``python -m nstcam``: the command-line interface."""

import sys

from nstcam.cli import main

sys.exit(main())
