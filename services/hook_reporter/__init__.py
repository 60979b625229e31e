"""The operator hook reporter: bounded, payload-free lifecycle reports with process start identity."""
