import sys

from handoff.cli import main

sys.exit(main())
