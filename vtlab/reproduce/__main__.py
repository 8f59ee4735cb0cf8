"""`python -m vtlab.reproduce`: see vtlab.reproduce."""

import sys

from vtlab.reproduce import main

sys.exit(main())
