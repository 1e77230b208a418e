-- What each metered scope (a tenant's budget) used per period, summed
-- over the replicas. period: microseconds since the Unix epoch (0: no period).
CREATE TABLE spend (
	scope              text NOT NULL,
	period             bigint NOT NULL,
	input_tokens       bigint NOT NULL,
	output_tokens      bigint NOT NULL,
	cache_read_tokens  bigint NOT NULL,
	cache_write_tokens bigint NOT NULL,
	unpriced_tokens    bigint NOT NULL,
	requests           bigint NOT NULL,
	cost_nano_usd      bigint NOT NULL,
	PRIMARY KEY (scope, period)
);
