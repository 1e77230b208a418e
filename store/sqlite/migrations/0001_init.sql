-- Times are INTEGER microseconds since the Unix epoch, UTC (NULL: the zero
-- time); JSON is TEXT, kept as given (NULL: none).

CREATE TABLE agents (
	id           TEXT PRIMARY KEY,
	tenant       TEXT NOT NULL,
	request      TEXT,
	driver       TEXT NOT NULL,
	model        TEXT NOT NULL,
	image        TEXT NOT NULL,
	engine       TEXT NOT NULL,
	sandbox_id   TEXT NOT NULL,
	sandbox_name TEXT NOT NULL,
	session_id   TEXT NOT NULL,
	status       TEXT NOT NULL,
	reason       TEXT NOT NULL,
	adopt        TEXT,
	turns        INTEGER NOT NULL,
	owner        TEXT NOT NULL,
	created      INTEGER,
	updated      INTEGER
);
CREATE INDEX agents_by_tenant ON agents (tenant, created);
CREATE INDEX agents_by_created ON agents (created);

CREATE TABLE turns (
	agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	n        INTEGER NOT NULL,
	prompt   TEXT NOT NULL,
	status   TEXT NOT NULL,
	result   TEXT,
	started  INTEGER,
	ended    INTEGER,
	PRIMARY KEY (agent_id, n)
);

CREATE TABLE events (
	agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	seq      INTEGER NOT NULL,
	turn     INTEGER NOT NULL,
	kind     TEXT NOT NULL,
	data     TEXT,
	time     INTEGER,
	PRIMARY KEY (agent_id, seq)
);
-- A turn's events without reading the turns before it.
CREATE INDEX events_by_turn ON events (agent_id, turn, seq);

CREATE TABLE tokens (
	id      TEXT PRIMARY KEY,
	hash    TEXT NOT NULL UNIQUE,
	tenant  TEXT NOT NULL,
	scopes  TEXT NOT NULL, -- JSON array
	expires INTEGER,
	created INTEGER,
	revoked INTEGER
);
CREATE INDEX tokens_by_tenant ON tokens (tenant, created);
CREATE INDEX tokens_by_created ON tokens (created);

CREATE TABLE idempotency (
	tenant  TEXT NOT NULL,
	key     TEXT NOT NULL,
	route   TEXT NOT NULL,
	ref     TEXT NOT NULL,
	created INTEGER,
	PRIMARY KEY (tenant, key)
);
-- DeleteAgent finds the keys that refer to the agent by these.
CREATE INDEX idempotency_by_ref ON idempotency (ref);
CREATE INDEX idempotency_by_route ON idempotency (route);

CREATE TABLE leases (
	agent_id TEXT PRIMARY KEY REFERENCES agents (id) ON DELETE CASCADE,
	holder   TEXT NOT NULL,
	expires  INTEGER NOT NULL
);
