-- Repositories registered for worktrees (git_repo.proto), the worktree columns the safe-removal
-- and setup-hook rules need, and the rescue refs a forced removal leaves behind (issue 13).
-- The migration runner wraps this file in one transaction.

CREATE TABLE git_repos (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    repo_path       TEXT NOT NULL UNIQUE,
    worktree_mode   TEXT NOT NULL DEFAULT 'global'
                    CHECK (worktree_mode IN ('global', 'local', 'custom')),
    local_subfolder TEXT NOT NULL DEFAULT '.worktree',
    custom_path     TEXT,
    setup_script    TEXT,
    auto_gitignore  INTEGER NOT NULL DEFAULT 1 CHECK (auto_gitignore IN (0, 1)),
    created_at      REAL NOT NULL,
    last_active     REAL NOT NULL
);

ALTER TABLE worktrees ADD COLUMN repo_id TEXT REFERENCES git_repos(id);
-- The repository's branch when the worktree was made: what "merged" is judged against.
ALTER TABLE worktrees ADD COLUMN base_branch TEXT;
-- 1 when the daemon created `branch` for this worktree: only such a branch is ever deleted.
ALTER TABLE worktrees ADD COLUMN branch_created INTEGER NOT NULL DEFAULT 0
    CHECK (branch_created IN (0, 1));
ALTER TABLE worktrees ADD COLUMN setup_status TEXT NOT NULL DEFAULT 'none'
    CHECK (setup_status IN ('none', 'succeeded', 'failed', 'timeout'));
ALTER TABLE worktrees ADD COLUMN setup_error TEXT;
CREATE INDEX idx_worktrees_repo_id ON worktrees(repo_id);

-- What a forced removal saved: `ref` (refs/betcode/rescue/<id>) points at `work_commit` when
-- uncommitted or untracked files were saved (its parent is `head_commit`), else at
-- `head_commit`. The ref keeps every commit alive in the repository's object store.
CREATE TABLE worktree_rescues (
    id            TEXT PRIMARY KEY,
    repo_path     TEXT NOT NULL,
    worktree_name TEXT NOT NULL,
    worktree_path TEXT NOT NULL,
    branch        TEXT NOT NULL,
    ref           TEXT NOT NULL,
    head_commit   TEXT NOT NULL,
    work_commit   TEXT,
    at_risk       TEXT NOT NULL,  -- JSON list of what the removal would have lost
    created_at    REAL NOT NULL
);
