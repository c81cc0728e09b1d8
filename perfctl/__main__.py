import sys

from perfctl.cli import main

sys.exit(main())
