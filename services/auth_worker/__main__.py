import sys

from services.auth_worker.main import main

sys.exit(main())
