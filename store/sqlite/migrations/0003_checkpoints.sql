-- The checkpoints agents made (a whole sandbox kept: an engine image or an
-- archive folder). They outlive their agent: no foreign key. data: the
-- library's Checkpoint as JSON.
CREATE TABLE checkpoints (
	id       TEXT PRIMARY KEY,
	tenant   TEXT NOT NULL,
	agent_id TEXT NOT NULL,
	created  INTEGER,
	size     INTEGER NOT NULL,
	data     TEXT
);
CREATE INDEX checkpoints_by_tenant ON checkpoints (tenant, created);
CREATE INDEX checkpoints_by_created ON checkpoints (created);
