-- A device paired through the relay: the relay's device login it paired with (its id at the
-- relay). Its credential is taken only on that login's relayed requests, and revoking either
-- revokes both (docs/RELAY.md "Pairing a phone through the relay"). NULL: paired directly.
ALTER TABLE web_devices ADD COLUMN relay_device_id TEXT;
