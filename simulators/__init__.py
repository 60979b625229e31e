"""Stand-ins for the mesh's outside peers, for tests and the demo: the operator session daemon
(``operator_sim``) and the Nous portal (``portal_sim``). Each is a process of its own, run as
``python -m simulators.<name>``; none is part of the mesh."""
