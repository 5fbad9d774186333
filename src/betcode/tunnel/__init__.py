"""The daemon's side of the tunnel to a relay (what it shares with the relay is in remote/)."""
