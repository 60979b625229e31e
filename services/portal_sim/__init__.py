"""A faithful local simulator of the Nous portal (OAuth device-code server) for tests and the demo."""
