-- What a subagent or an orchestration step needs to be started again after a daemon restart
-- (options: env, auto-approve limits, worktree; JSON), the user's own step ids (unique per
-- orchestration, while orchestration_steps.id is global), and why something failed.
ALTER TABLE subagents ADD COLUMN orchestration_id TEXT;
ALTER TABLE subagents ADD COLUMN step_id TEXT;
ALTER TABLE subagents ADD COLUMN options TEXT NOT NULL DEFAULT '{}';
ALTER TABLE subagents ADD COLUMN error_message TEXT;
ALTER TABLE orchestration_steps ADD COLUMN step_key TEXT NOT NULL DEFAULT '';
ALTER TABLE orchestration_steps ADD COLUMN options TEXT NOT NULL DEFAULT '{}';
ALTER TABLE orchestration_steps ADD COLUMN result_summary TEXT;
ALTER TABLE orchestration_steps ADD COLUMN error_message TEXT;
ALTER TABLE orchestrations ADD COLUMN error_message TEXT;
CREATE UNIQUE INDEX idx_orch_step_key ON orchestration_steps(orchestration_id, step_key);
