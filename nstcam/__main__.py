"""``python -m nstcam``: the command-line interface."""

import sys

from nstcam._entry import main

sys.exit(main())
