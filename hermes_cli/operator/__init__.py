"""The operator plugin's integration with a Hermes home: probing a rendered plugin, and judging
what the probe found."""
