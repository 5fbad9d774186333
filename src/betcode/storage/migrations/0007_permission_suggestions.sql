-- claude's permission_suggestions of a can_use_tool (JSON array, as claude sent them), stored
-- with the request: they scope an "allow for this session" answer, also one given after the
-- daemon restarted and re-attached the request to the claude that asked.
ALTER TABLE pending_permissions ADD COLUMN permission_suggestions TEXT NOT NULL DEFAULT '[]';
