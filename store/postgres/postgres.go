// Package postgres is the store of sandbox-agent serve for several
// replicas sharing one PostgreSQL database (github.com/jackc/pgx/v5).
// Whatever must be atomic across replicas is one statement (or one
// transaction) that locks the row it decides on, and the database's clock decides
// lease expiry.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandbox-agent/sandbox-agent/store"
	"github.com/sandbox-agent/sandbox-agent/store/internal/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock key replicas migrate under (any
// constant; this one is "sa-store" in ASCII).
const migrationLock int64 = 0x73612d73746f7265

// Store is a store.Store in a PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
}

var _ store.Store = (*Store)(nil)

// Open connects to the database of dsn (a URL, postgres://..., or
// key=value pairs; pgxpool settings such as pool_max_conns too) and
// brings its schema up to date. The tables go to the first schema of
// the search_path.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err) // pgx leaves the password out
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return s, nil
}

// migrate applies the migrations the database lacks, one transaction
// each, under an advisory lock: replicas starting together take turns,
// and each finds what the one before it applied.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrate.Load(migrations, "migrations")
	if err != nil {
		return err
	}
	for done := false; !done; {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version integer PRIMARY KEY,
				applied timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
			var current int
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
				return err
			}
			m, err := migrate.Next(ms, current)
			if err != nil || m == nil {
				done = true
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			_, err = tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, m.Version)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	return nil
}

// Close closes the pool's connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func jsonArg(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b) // pgx sends a string to a json parameter as it is
}

// timeCol scans a timestamptz, NULL as the zero time, in UTC.
type timeCol struct{ t *time.Time }

func (c timeCol) ScanTimestamptz(v pgtype.Timestamptz) error {
	*c.t = time.Time{}
	if v.Valid {
		*c.t = v.Time.UTC()
	}
	return nil
}

// pgCode is the SQLSTATE of a server error ("" for others).
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

const foreignKeyViolation = "23503"

// notFound turns pgx.ErrNoRows into store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// list reads rows, each into the fields of a T that cols names.
func list[T any](ctx context.Context, s *Store, cols func(*T) []any, query string, args ...any) ([]T, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var x T
		if err := rows.Scan(cols(&x)...); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

const agentColumns = `id, tenant, request, driver, model, image, engine, sandbox_id, sandbox_name,
	session_id, status, reason, adopt, turns, owner, created, updated`

func agentArgs(a store.Agent) []any {
	return []any{a.ID, a.Tenant, jsonArg(a.Request), a.Driver, a.Model, a.Image, a.Engine, a.SandboxID, a.SandboxName,
		a.SessionID, a.Status, a.Reason, jsonArg(a.Adopt), a.Turns, a.Owner, timeArg(a.Created), timeArg(a.Updated)}
}

func agentCols(a *store.Agent) []any {
	return []any{&a.ID, &a.Tenant, (*[]byte)(&a.Request), &a.Driver, &a.Model, &a.Image, &a.Engine, &a.SandboxID, &a.SandboxName,
		&a.SessionID, &a.Status, &a.Reason, (*[]byte)(&a.Adopt), &a.Turns, &a.Owner, timeCol{&a.Created}, timeCol{&a.Updated}}
}

func (s *Store) CreateAgent(ctx context.Context, a store.Agent) error {
	tag, err := s.pool.Exec(ctx, `INSERT INTO agents (`+agentColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) ON CONFLICT DO NOTHING`, agentArgs(a)...)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrConflict
	}
	if err != nil {
		return fmt.Errorf("postgres: create agent %q: %w", a.ID, err)
	}
	return nil
}

func (s *Store) UpdateAgent(ctx context.Context, a store.Agent) error {
	tag, err := s.pool.Exec(ctx, `UPDATE agents SET tenant = $2, request = $3, driver = $4, model = $5, image = $6,
		engine = $7, sandbox_id = $8, sandbox_name = $9, session_id = $10, status = $11, reason = $12,
		adopt = $13, turns = $14, owner = $15, created = $16, updated = $17
		WHERE id = $1`, agentArgs(a)...)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("postgres: update agent %q: %w", a.ID, err)
	}
	return nil
}

func (s *Store) GetAgent(ctx context.Context, id string) (store.Agent, error) {
	var a store.Agent
	if err := s.pool.QueryRow(ctx, `SELECT `+agentColumns+` FROM agents WHERE id = $1`, id).Scan(agentCols(&a)...); err != nil {
		return store.Agent{}, fmt.Errorf("postgres: get agent %q: %w", id, notFound(err))
	}
	return a, nil
}

func (s *Store) ListAgents(ctx context.Context, tenant string) ([]store.Agent, error) {
	var as []store.Agent
	var err error
	if tenant == "" {
		as, err = list(ctx, s, agentCols, `SELECT `+agentColumns+` FROM agents ORDER BY created NULLS FIRST, seq`)
	} else {
		as, err = list(ctx, s, agentCols, `SELECT `+agentColumns+` FROM agents WHERE tenant = $1 ORDER BY created NULLS FIRST, seq`, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: list agents: %w", err)
	}
	return as, nil
}

// DeleteAgent deletes the agent; its turns, events and lease follow by
// foreign key (ON DELETE CASCADE), its idempotency keys here.
func (s *Store) DeleteAgent(ctx context.Context, id string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM agents WHERE id = $1`, id)
		if err == nil && tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM idempotency WHERE ref = $1 OR route = 'turn:' || $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: delete agent %q: %w", id, err)
	}
	return nil
}

const turnColumns = `agent_id, n, prompt, status, result, started, ended`

func turnCols(t *store.Turn) []any {
	return []any{&t.AgentID, &t.N, &t.Prompt, &t.Status, (*[]byte)(&t.Result), timeCol{&t.Started}, timeCol{&t.Ended}}
}

// PutTurn raises Turns and writes the turn in one statement; no turn is
// written for an absent agent (the UPDATE returns no row).
func (s *Store) PutTurn(ctx context.Context, t store.Turn) error {
	tag, err := s.pool.Exec(ctx, `WITH a AS (
			UPDATE agents SET turns = greatest(turns, $2::integer) WHERE id = $1 RETURNING id)
		INSERT INTO turns (`+turnColumns+`)
		SELECT a.id, $2::integer, $3::text, $4::text, $5::json, $6::timestamptz, $7::timestamptz FROM a
		ON CONFLICT (agent_id, n) DO UPDATE SET prompt = excluded.prompt, status = excluded.status,
			result = excluded.result, started = excluded.started, ended = excluded.ended`,
		t.AgentID, t.N, t.Prompt, t.Status, jsonArg(t.Result), timeArg(t.Started), timeArg(t.Ended))
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("postgres: put turn %d of agent %q: %w", t.N, t.AgentID, err)
	}
	return nil
}

func (s *Store) GetTurn(ctx context.Context, agentID string, n int) (store.Turn, error) {
	var t store.Turn
	err := s.pool.QueryRow(ctx, `SELECT `+turnColumns+` FROM turns WHERE agent_id = $1 AND n = $2`, agentID, n).Scan(turnCols(&t)...)
	if err != nil {
		return store.Turn{}, fmt.Errorf("postgres: get turn %d of agent %q: %w", n, agentID, notFound(err))
	}
	return t, nil
}

func (s *Store) ListTurns(ctx context.Context, agentID string) ([]store.Turn, error) {
	ts, err := list(ctx, s, turnCols, `SELECT `+turnColumns+` FROM turns WHERE agent_id = $1 ORDER BY n`, agentID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list turns of agent %q: %w", agentID, err)
	}
	return ts, nil
}

// AppendEvents appends each agent's events in one statement that moves
// the agent's last_seq from the seq before the first: the UPDATE locks
// the agent's row, so appenders to one agent queue there, and it checks
// last_seq against the latest committed value (READ COMMITTED re-reads a
// row it waited for), so of two appenders of the same seq one finds
// nothing to update and inserts nothing.
func (s *Store) AppendEvents(ctx context.Context, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	byAgent := map[string][]store.Event{}
	var ids []string
	for _, e := range evs {
		if _, ok := byAgent[e.AgentID]; !ok {
			ids = append(ids, e.AgentID)
		}
		byAgent[e.AgentID] = append(byAgent[e.AgentID], e)
	}
	var err error
	if len(ids) == 1 {
		err = appendEvents(ctx, s.pool, evs)
	} else {
		sort.Strings(ids) // two batches lock their agents in one order
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, id := range ids {
				if err := appendEvents(ctx, tx, byAgent[id]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("postgres: append events: %w", err)
	}
	return nil
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// appendEvents appends the events of one agent.
func appendEvents(ctx context.Context, q querier, evs []store.Event) error {
	id, first := evs[0].AgentID, evs[0].Seq
	n := len(evs)
	seqs, turns, kinds := make([]int64, n), make([]int32, n), make([]string, n)
	data, times := make([]*string, n), make([]pgtype.Timestamptz, n)
	for i, e := range evs {
		if e.Seq != first+int64(i) {
			return fmt.Errorf("event %d of agent %q after %d: %w", e.Seq, id, first+int64(i)-1, store.ErrConflict)
		}
		seqs[i], turns[i], kinds[i] = e.Seq, int32(e.Turn), e.Kind
		if len(e.Data) > 0 {
			d := string(e.Data)
			data[i] = &d
		}
		times[i] = pgtype.Timestamptz{Time: e.Time, Valid: !e.Time.IsZero()}
	}
	tag, err := q.Exec(ctx, `WITH a AS (
			UPDATE agents SET last_seq = $3 WHERE id = $1 AND last_seq = $2 - 1 RETURNING id)
		INSERT INTO events (agent_id, seq, turn, kind, data, time)
		SELECT a.id, e.* FROM a, unnest($4::bigint[], $5::integer[], $6::text[], $7::json[], $8::timestamptz[]) AS e`,
		id, first, seqs[n-1], seqs, turns, kinds, data, times)
	if err != nil || tag.RowsAffected() == int64(n) {
		return err
	}
	var last int64
	if err := q.QueryRow(ctx, `SELECT last_seq FROM agents WHERE id = $1`, id).Scan(&last); err != nil {
		return fmt.Errorf("agent %q: %w", id, notFound(err))
	}
	return fmt.Errorf("event %d of agent %q after %d: %w", first, id, last, store.ErrConflict)
}

func eventCols(e *store.Event) []any {
	return []any{&e.AgentID, &e.Seq, &e.Turn, &e.Kind, (*[]byte)(&e.Data), timeCol{&e.Time}}
}

// Events reads all events after after when limit <= 0.
func (s *Store) Events(ctx context.Context, agentID string, turn int, after int64, limit int) ([]store.Event, error) {
	var lim any = limit
	if limit <= 0 {
		lim = nil // LIMIT NULL: none
	}
	const cols = `SELECT agent_id, seq, turn, kind, data, time FROM events `
	var evs []store.Event
	var err error
	if turn > 0 {
		evs, err = list(ctx, s, eventCols, cols+`WHERE agent_id = $1 AND turn = $2 AND seq > $3 ORDER BY seq LIMIT $4`, agentID, turn, after, lim)
	} else {
		evs, err = list(ctx, s, eventCols, cols+`WHERE agent_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, agentID, after, lim)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: events of agent %q: %w", agentID, err)
	}
	return evs, nil
}

// LastSeq: ErrNotFound when the agent is absent.
func (s *Store) LastSeq(ctx context.Context, agentID string) (int64, error) {
	var last int64
	err := s.pool.QueryRow(ctx, `SELECT last_seq FROM agents WHERE id = $1`, agentID).Scan(&last)
	if err != nil {
		return 0, fmt.Errorf("postgres: last seq of agent %q: %w", agentID, notFound(err))
	}
	return last, nil
}

const tokenColumns = `id, hash, tenant, scopes, expires, created, revoked`

func tokenCols(t *store.Token) []any {
	return []any{&t.ID, &t.Hash, &t.Tenant, &t.Scopes, timeCol{&t.Expires}, timeCol{&t.Created}, timeCol{&t.Revoked}}
}

func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	scopes := t.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO tokens (`+tokenColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
		t.ID, t.Hash, t.Tenant, scopes, timeArg(t.Expires), timeArg(t.Created), timeArg(t.Revoked))
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrConflict // the id or the hash
	}
	if err != nil {
		return fmt.Errorf("postgres: create token %q: %w", t.ID, err)
	}
	return nil
}

// noScopes reads an empty scope list as nil, as it was most likely given.
func noScopes(ts []store.Token) []store.Token {
	for i := range ts {
		if len(ts[i].Scopes) == 0 {
			ts[i].Scopes = nil
		}
	}
	return ts
}

func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	var t store.Token
	if err := s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash).Scan(tokenCols(&t)...); err != nil {
		return store.Token{}, fmt.Errorf("postgres: token by hash: %w", notFound(err))
	}
	return noScopes([]store.Token{t})[0], nil
}

func (s *Store) ListTokens(ctx context.Context, tenant string) ([]store.Token, error) {
	var ts []store.Token
	var err error
	if tenant == "" {
		ts, err = list(ctx, s, tokenCols, `SELECT `+tokenColumns+` FROM tokens ORDER BY created NULLS FIRST, seq`)
	} else {
		ts, err = list(ctx, s, tokenCols, `SELECT `+tokenColumns+` FROM tokens WHERE tenant = $1 ORDER BY created NULLS FIRST, seq`, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: list tokens: %w", err)
	}
	return noScopes(ts), nil
}

func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE tokens SET revoked = coalesce(revoked, $2) WHERE id = $1`, id, timeArg(at))
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("postgres: revoke token %q: %w", id, err)
	}
	return nil
}

const idempotencyColumns = `tenant, key, route, ref, created`

func idempotencyCols(k *store.Idempotency) []any {
	return []any{&k.Tenant, &k.Key, &k.Route, &k.Ref, timeCol{&k.Created}}
}

// retries bounds the loops that try again when a record changes between
// two statements: each time another caller made progress.
const retries = 100

// ClaimIdempotency inserts the key or reads the one that holds it; when
// that one is released between the two, it tries again.
func (s *Store) ClaimIdempotency(ctx context.Context, k store.Idempotency) (store.Idempotency, bool, error) {
	for range retries {
		var held store.Idempotency
		err := s.pool.QueryRow(ctx, `INSERT INTO idempotency (`+idempotencyColumns+`) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT DO NOTHING RETURNING `+idempotencyColumns,
			k.Tenant, k.Key, k.Route, k.Ref, timeArg(k.Created)).Scan(idempotencyCols(&held)...)
		if err == nil {
			return held, true, nil
		}
		if errors.Is(err, pgx.ErrNoRows) {
			err = s.pool.QueryRow(ctx, `SELECT `+idempotencyColumns+` FROM idempotency WHERE tenant = $1 AND key = $2`,
				k.Tenant, k.Key).Scan(idempotencyCols(&held)...)
			if err == nil {
				return held, false, nil
			}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Idempotency{}, false, fmt.Errorf("postgres: claim idempotency key %q: %w", k.Key, err)
		}
	}
	return store.Idempotency{}, false, fmt.Errorf("postgres: claim idempotency key %q: released %d times while claiming", k.Key, retries)
}

// SetIdempotencyRef: ErrNotFound when the key is not claimed.
func (s *Store) SetIdempotencyRef(ctx context.Context, tenant, key, ref string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE idempotency SET ref = $3 WHERE tenant = $1 AND key = $2`, tenant, key, ref)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("postgres: set idempotency ref of %q: %w", key, err)
	}
	return nil
}

func (s *Store) ReleaseIdempotency(ctx context.Context, tenant, key string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM idempotency WHERE tenant = $1 AND key = $2`, tenant, key); err != nil {
		return fmt.Errorf("postgres: release idempotency key %q: %w", key, err)
	}
	return nil
}

func leaseCols(l *store.Lease) []any { return []any{&l.AgentID, &l.Holder, timeCol{&l.Expires}} }

// AcquireLease takes or renews the lease in one statement: the upsert
// changes the row only when it expired or is holder's, and racing
// acquirers queue on the row's lock, each deciding on what the one before
// wrote. ErrNotFound when the agent is absent.
func (s *Store) AcquireLease(ctx context.Context, agentID, holder string, ttl time.Duration) (store.Lease, error) {
	for range retries {
		var l store.Lease
		err := s.pool.QueryRow(ctx, `INSERT INTO leases (agent_id, holder, expires)
			VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond')
			ON CONFLICT (agent_id) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
			WHERE leases.expires <= now() OR leases.holder = excluded.holder
			RETURNING agent_id, holder, expires`, agentID, holder, ttl.Microseconds()).Scan(leaseCols(&l)...)
		if err == nil {
			return l, nil
		}
		if pgCode(err) == foreignKeyViolation {
			err = fmt.Errorf("%w: %w", store.ErrNotFound, err)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			// Held: by whom? (Released or expired since: try again.)
			err = s.pool.QueryRow(ctx, `SELECT agent_id, holder, expires FROM leases WHERE agent_id = $1 AND expires > now()`,
				agentID).Scan(leaseCols(&l)...)
			if err == nil {
				return l, fmt.Errorf("postgres: acquire lease of agent %q: %w", agentID, store.ErrLeaseHeld)
			}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Lease{}, fmt.Errorf("postgres: acquire lease of agent %q: %w", agentID, err)
		}
	}
	return store.Lease{}, fmt.Errorf("postgres: acquire lease of agent %q: freed %d times while acquiring", agentID, retries)
}

func (s *Store) ReleaseLease(ctx context.Context, agentID, holder string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM leases WHERE agent_id = $1 AND holder = $2`, agentID, holder); err != nil {
		return fmt.Errorf("postgres: release lease of agent %q: %w", agentID, err)
	}
	return nil
}

var addSpendSQL = store.AddSpendSQL(func(i int) string { return "$" + strconv.Itoa(i) })

func (s *Store) AddSpend(ctx context.Context, sp store.Spend) (store.Spend, error) {
	out := store.Spend{Scope: sp.Scope, Period: periodTime(sp.Period)}
	if err := s.pool.QueryRow(ctx, addSpendSQL, append([]any{sp.Scope, periodArg(sp.Period)}, sp.Counts()...)...).Scan(out.CountFields()...); err != nil {
		return store.Spend{}, fmt.Errorf("postgres: add spend of %q: %w", sp.Scope, err)
	}
	return out, nil
}

func (s *Store) GetSpend(ctx context.Context, scope string, period time.Time) (store.Spend, error) {
	out := store.Spend{Scope: scope, Period: periodTime(period)}
	err := s.pool.QueryRow(ctx, `SELECT `+strings.Join(store.SpendColumns, ", ")+` FROM spend WHERE scope = $1 AND period = $2`,
		scope, periodArg(period)).Scan(out.CountFields()...)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return store.Spend{}, fmt.Errorf("postgres: spend of %q: %w", scope, err)
	}
	return out, nil
}

// periodArg is a period's key: microseconds since the Unix epoch, 0 for
// the zero time.
func periodArg(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// periodTime is t as the key keeps it.
func periodTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}
