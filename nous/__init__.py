"""The Nous account domain, shared by the auth worker, the handoff retry worker and the CLI.

``store`` (the install's account and its two write seams), ``access_token`` (the claims of
the portal's token), ``portal`` (its HTTP API), ``refresh`` (the token refresh under the
store's lock) and ``guest_handoff`` (moving a guest's apps to the account that replaced it).
Every module is public; a module's private names start with ``_``. Imports only ``shared``.
"""
