"""What the test tiers and the benchmarks share: real child processes of this checkout
(``processes``), one way to run ``hermes`` (``cli``), throwaway installs with their origin
and git (``installs``), release patches (``releases``), and the servers and doubles the tests
talk to (``portal``, ``archive_origin``, ``peers/``, ``doubles/``, ``fixtures/``)."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
DOUBLES = SUPPORT / "doubles"  # stand-ins for what cannot run here (``systemctl``)
FIXTURES = SUPPORT / "fixtures"  # captured real output the doubles and rules are held to
COMPAT = SUPPORT.parent / "compat"  # the pinned hand-over surface
