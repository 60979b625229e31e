import sys

from services.hook_reporter.main import main

sys.exit(main())
