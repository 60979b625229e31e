"""The Nous auth worker: device-code sign-in as a stream of typed states, and token keepalive."""
