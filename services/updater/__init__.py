"""The updater: ``plan → snapshot → apply → restart-per-kind → verify → report``.

The process that starts an update runs the old code: it holds the lock, writes the receipt,
plans, snapshots and applies. Once the tree has moved (the commit point) the rest runs in a
freshly spawned interpreter of the NEW code, which answers with a result correlated to this
update's id and nonce. The old interpreter never imports a module of the new tree.
"""
