"""The tunnel between a daemon and a relay: its frames, and the daemon's side of it."""
