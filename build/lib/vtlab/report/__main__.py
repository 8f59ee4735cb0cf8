"""`python -m vtlab.report SWEEP_DIR [SWEEP_DIR ...]`: see vtlab.report and vtlab.report.cli."""

import sys

from vtlab.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
