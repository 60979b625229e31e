"""``python -m services.updater --update-id ID [--branch NAME] [--backup | --no-backup] [--no-canary] [--max-parallel N] [--take-held] [--confirm-within SECONDS] [--rollback [ID] [--confirm-expired]]``.

Started detached by ``hermes update`` (its own session, so a dying CLI or a restarted gateway
that launched it does not take the update down); ``hermes logs update --follow`` re-attaches.
"""

import argparse
import sys

from services.updater.plan import update_options
from services.updater.run import run_update
from shared import homes, logs
from shared.version import INSTALL_ROOT

parser = argparse.ArgumentParser(prog="python -m services.updater")
parser.add_argument("--update-id", required=True)
parser.add_argument("--branch")
backup = parser.add_mutually_exclusive_group()
backup.add_argument("--backup", action="store_true")
backup.add_argument("--no-backup", action="store_true")
parser.add_argument("--no-canary", action="store_true")
parser.add_argument("--max-parallel", type=int)
parser.add_argument("--take-held", action="store_true")
parser.add_argument("--rollback", nargs="?", const="", metavar="UPDATE_ID")
parser.add_argument("--confirm-within", type=float, metavar="SECONDS")
parser.add_argument("--confirm-expired", action="store_true")  # started by a confirm timer
args = parser.parse_args()
logs.configure("updater", update_id=args.update_id)
sys.exit(run_update(homes.root_home(), INSTALL_ROOT, args.update_id, update_options(args)))
