-- A push subscription belongs to the signed-in device that registered it (web_devices, or
-- 'owner' for the access token): it is pushed to only while that device is signed in, so a
-- revoked device, or every device after a rotation of the access token, gets nothing more.
-- Rows from before devices existed have '' and are never pushed to (their page registers
-- again once signed in).
ALTER TABLE push_subscriptions ADD COLUMN device_id TEXT NOT NULL DEFAULT '';
