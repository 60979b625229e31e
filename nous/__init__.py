"""The Nous account domain, shared by the auth worker, the handoff retry worker and the CLI.

- ``store``: the install's account and the two write seams every save goes through.
- ``access_token``: the claims of the token the portal issues.
- ``portal``: the portal's HTTP API; ``portal_errors``: its typed failures.
- ``refresh``: the token refresh under the store's lock; ``refresh_rules``: when, and what
  each failure means.
- ``guest_handoff``: a replaced guest's apps move to the account saved over it.

Every module is public; a module's private names start with ``_``. Imports only ``shared``.
"""
