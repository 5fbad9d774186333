-- A push subscription registered through the relay (the web gateway) belongs to a device that
-- reaches this machine through the relay: its pushes go out through the relay too, encrypted
-- here. Rows from before are direct ones.
ALTER TABLE push_subscriptions ADD COLUMN relayed INTEGER NOT NULL DEFAULT 0;
