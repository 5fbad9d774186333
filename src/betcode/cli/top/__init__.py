"""`betcode top`: a live view of every session of the daemon."""
