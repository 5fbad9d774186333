"""Request handling the gRPC services (server/) and the web client (web/) share, free of either
transport: application errors and their codes, request checks, a client's Converse requests,
connected clients, event pumping, stored rows as betcode.v1 messages."""
