-- What each metered scope (a tenant's budget) used per period, summed
-- over the replicas. period: INTEGER microseconds (0: no period).
CREATE TABLE spend (
	scope              TEXT NOT NULL,
	period             INTEGER NOT NULL,
	input_tokens       INTEGER NOT NULL,
	output_tokens      INTEGER NOT NULL,
	cache_read_tokens  INTEGER NOT NULL,
	cache_write_tokens INTEGER NOT NULL,
	unpriced_tokens    INTEGER NOT NULL,
	requests           INTEGER NOT NULL,
	cost_nano_usd      INTEGER NOT NULL,
	PRIMARY KEY (scope, period)
);
