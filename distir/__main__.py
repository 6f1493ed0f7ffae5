import sys

from distir.cli import main

sys.exit(main())
