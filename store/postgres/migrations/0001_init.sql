-- Times are timestamptz (microseconds), NULL for the zero time; JSON is
-- json, kept as given (jsonb would refuse \u0000, which agents' output may
-- hold), NULL when empty. seq columns keep insertion order for records
-- created at the same time.

CREATE TABLE agents (
	id           text PRIMARY KEY,
	seq          bigint GENERATED ALWAYS AS IDENTITY,
	tenant       text NOT NULL,
	request      json,
	driver       text NOT NULL,
	model        text NOT NULL,
	image        text NOT NULL,
	engine       text NOT NULL,
	sandbox_id   text NOT NULL,
	sandbox_name text NOT NULL,
	session_id   text NOT NULL,
	status       text NOT NULL,
	reason       text NOT NULL,
	adopt        json,
	turns        integer NOT NULL,
	last_seq     bigint NOT NULL DEFAULT 0, -- its events' (AppendEvents moves it)
	owner        text NOT NULL,
	created      timestamptz,
	updated      timestamptz
);
CREATE INDEX agents_by_tenant ON agents (tenant, created NULLS FIRST, seq);
CREATE INDEX agents_by_created ON agents (created NULLS FIRST, seq);

CREATE TABLE turns (
	agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	n        integer NOT NULL,
	prompt   text NOT NULL,
	status   text NOT NULL,
	result   json,
	started  timestamptz,
	ended    timestamptz,
	PRIMARY KEY (agent_id, n)
);

CREATE TABLE events (
	agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	seq      bigint NOT NULL,
	turn     integer NOT NULL,
	kind     text NOT NULL,
	data     json,
	time     timestamptz,
	PRIMARY KEY (agent_id, seq)
);
-- A turn's events without reading the turns before it.
CREATE INDEX events_by_turn ON events (agent_id, turn, seq);

CREATE TABLE tokens (
	id      text PRIMARY KEY,
	seq     bigint GENERATED ALWAYS AS IDENTITY,
	hash    text NOT NULL UNIQUE,
	tenant  text NOT NULL,
	scopes  text[] NOT NULL,
	expires timestamptz,
	created timestamptz,
	revoked timestamptz
);
CREATE INDEX tokens_by_tenant ON tokens (tenant, created NULLS FIRST, seq);
CREATE INDEX tokens_by_created ON tokens (created NULLS FIRST, seq);

CREATE TABLE idempotency (
	tenant  text NOT NULL,
	key     text NOT NULL,
	route   text NOT NULL,
	ref     text NOT NULL,
	created timestamptz,
	PRIMARY KEY (tenant, key)
);
-- DeleteAgent finds the keys that refer to the agent by these.
CREATE INDEX idempotency_by_ref ON idempotency (ref);
CREATE INDEX idempotency_by_route ON idempotency (route);

CREATE TABLE leases (
	agent_id text PRIMARY KEY REFERENCES agents (id) ON DELETE CASCADE,
	holder   text NOT NULL,
	expires  timestamptz NOT NULL
);
