"""The live fleet view (``hermes mesh top``, ``hermes gateway status --watch``): every gateway
of the install and of the hosts its mesh names, kept current from the gateways' own events.

``rows`` is the rule (what an answer or event makes of a row, no I/O); ``watch`` one
gateway's thread; ``board`` where the rows meet; ``install`` what the header says of the
install; ``screen`` the terminal; ``view`` puts them together.
"""
