import sys

from services.gateway_host.main import main

sys.exit(main())
