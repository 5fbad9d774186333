"""The pieces `betcode.daemon` (the composition root) puts together: the startup checks, the
core every transport shares, the gRPC services, and one module per optional capability."""
