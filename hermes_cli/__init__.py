"""The ``hermes`` command line: a client of the mesh's services.

Commands import their heavy dependencies (trio, zmq, httpx) themselves, so that
``hermes --version`` and other light commands start fast.
"""
