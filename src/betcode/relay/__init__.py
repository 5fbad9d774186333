"""The relay: accounts, machines, and routing of client calls to daemons' tunnels over NATS."""
