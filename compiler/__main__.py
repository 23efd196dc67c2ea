"""``python -m gradc``."""

import sys

from gradc.cli import main

sys.exit(main())
