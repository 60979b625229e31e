"""The guest handoff: a free-tier identity's connected apps move to the account saved over it.

``rules`` (the decisions: records and a clock in, records out), ``records`` (the records on
disk, ``guest_handoff.json``) and ``attempts`` (claim attempts and the bounded drain: the only
code that sends a claim).
"""
