"""What the relay and the daemon's tunnel share: tunnel frames, keys and certificates, end-to-end
encryption, owner-only files, and the parameters of an attention notification."""
