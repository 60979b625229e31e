import sys

from services.handoff_retry.main import main

sys.exit(main())
