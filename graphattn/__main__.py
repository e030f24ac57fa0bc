import sys

from graphattn.cli.main import main

sys.exit(main())
