-- The checkpoints agents made (a whole sandbox kept: an engine image or an
-- archive folder). They outlive their agent: no foreign key. data: the
-- library's Checkpoint as JSON.
CREATE TABLE checkpoints (
	id       text PRIMARY KEY,
	seq      bigint GENERATED ALWAYS AS IDENTITY,
	tenant   text NOT NULL,
	agent_id text NOT NULL,
	created  timestamptz,
	size     bigint NOT NULL,
	data     json
);
CREATE INDEX checkpoints_by_tenant ON checkpoints (tenant, created NULLS FIRST, seq);
CREATE INDEX checkpoints_by_created ON checkpoints (created NULLS FIRST, seq);
