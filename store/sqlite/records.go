package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandbox-agent/sandbox-agent/store"
)

// now is the database's clock, which decides lease expiry: for an
// embedded database, the process's.
func now() time.Time { return time.Now() }

const agentColumns = `id, tenant, request, driver, model, image, engine, sandbox_id, sandbox_name,
	session_id, status, reason, adopt, turns, owner, created, updated`

func agentArgs(a store.Agent) []any {
	return []any{a.ID, a.Tenant, jsonArg(a.Request), a.Driver, a.Model, a.Image, a.Engine, a.SandboxID, a.SandboxName,
		a.SessionID, a.Status, a.Reason, jsonArg(a.Adopt), a.Turns, a.Owner, timeArg(a.Created), timeArg(a.Updated)}
}

func agentCols(a *store.Agent) []any {
	return []any{&a.ID, &a.Tenant, jsonCol{&a.Request}, &a.Driver, &a.Model, &a.Image, &a.Engine, &a.SandboxID, &a.SandboxName,
		&a.SessionID, &a.Status, &a.Reason, jsonCol{&a.Adopt}, &a.Turns, &a.Owner, timeCol{&a.Created}, timeCol{&a.Updated}}
}

func (s *Store) CreateAgent(ctx context.Context, a store.Agent) error {
	n, err := s.exec(ctx, `INSERT INTO agents (`+agentColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, agentArgs(a)...)
	if err == nil && n == 0 {
		err = store.ErrConflict
	}
	if err != nil {
		return fmt.Errorf("sqlite: create agent %q: %w", a.ID, err)
	}
	return nil
}

func (s *Store) UpdateAgent(ctx context.Context, a store.Agent) error {
	n, err := s.exec(ctx, `UPDATE agents SET tenant = ?2, request = ?3, driver = ?4, model = ?5, image = ?6,
		engine = ?7, sandbox_id = ?8, sandbox_name = ?9, session_id = ?10, status = ?11, reason = ?12,
		adopt = ?13, turns = ?14, owner = ?15, created = ?16, updated = ?17
		WHERE id = ?1`, agentArgs(a)...)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("sqlite: update agent %q: %w", a.ID, err)
	}
	return nil
}

func (s *Store) GetAgent(ctx context.Context, id string) (store.Agent, error) {
	var a store.Agent
	if err := s.get(ctx, agentCols(&a), `SELECT `+agentColumns+` FROM agents WHERE id = ?`, id); err != nil {
		return store.Agent{}, fmt.Errorf("sqlite: get agent %q: %w", id, notFound(err))
	}
	return a, nil
}

func (s *Store) ListAgents(ctx context.Context, tenant string) ([]store.Agent, error) {
	var as []store.Agent
	var err error
	// rowid: insertion order among agents created at the same time.
	if tenant == "" {
		as, err = query(ctx, s, agentCols, `SELECT `+agentColumns+` FROM agents ORDER BY created, rowid`)
	} else {
		as, err = query(ctx, s, agentCols, `SELECT `+agentColumns+` FROM agents WHERE tenant = ? ORDER BY created, rowid`, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: list agents: %w", err)
	}
	return as, nil
}

// DeleteAgent deletes the agent; its turns, events and lease follow by
// foreign key (ON DELETE CASCADE), its idempotency keys here.
func (s *Store) DeleteAgent(ctx context.Context, id string) error {
	err := s.write(ctx, func(c *conn) error {
		n, err := c.exec(ctx, `DELETE FROM agents WHERE id = ?`, id)
		if err == nil && n == 0 {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		_, err = c.exec(ctx, `DELETE FROM idempotency WHERE ref = ?1 OR route = 'turn:' || ?1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete agent %q: %w", id, err)
	}
	return nil
}

const turnColumns = `agent_id, n, prompt, status, result, started, ended`

func turnCols(t *store.Turn) []any {
	return []any{&t.AgentID, &t.N, &t.Prompt, &t.Status, jsonCol{&t.Result}, timeCol{&t.Started}, timeCol{&t.Ended}}
}

func (s *Store) PutTurn(ctx context.Context, t store.Turn) error {
	err := s.write(ctx, func(c *conn) error {
		n, err := c.exec(ctx, `UPDATE agents SET turns = max(turns, ?2) WHERE id = ?1`, t.AgentID, t.N)
		if err == nil && n == 0 {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		_, err = c.exec(ctx, `INSERT INTO turns (`+turnColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (agent_id, n) DO UPDATE SET prompt = excluded.prompt, status = excluded.status,
				result = excluded.result, started = excluded.started, ended = excluded.ended`,
			t.AgentID, t.N, t.Prompt, t.Status, jsonArg(t.Result), timeArg(t.Started), timeArg(t.Ended))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: put turn %d of agent %q: %w", t.N, t.AgentID, err)
	}
	return nil
}

func (s *Store) GetTurn(ctx context.Context, agentID string, n int) (store.Turn, error) {
	var t store.Turn
	if err := s.get(ctx, turnCols(&t), `SELECT `+turnColumns+` FROM turns WHERE agent_id = ? AND n = ?`, agentID, n); err != nil {
		return store.Turn{}, fmt.Errorf("sqlite: get turn %d of agent %q: %w", n, agentID, notFound(err))
	}
	return t, nil
}

func (s *Store) ListTurns(ctx context.Context, agentID string) ([]store.Turn, error) {
	ts, err := query(ctx, s, turnCols, `SELECT `+turnColumns+` FROM turns WHERE agent_id = ? ORDER BY n`, agentID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list turns of agent %q: %w", agentID, err)
	}
	return ts, nil
}

// lastSeq reads the agent's last seq, no row when the agent is absent.
const lastSeq = `SELECT coalesce((SELECT max(seq) FROM events WHERE agent_id = a.id), 0) FROM agents a WHERE a.id = ?`

func (s *Store) AppendEvents(ctx context.Context, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	err := s.write(ctx, func(c *conn) error {
		last := map[string]int64{} // per agent, should a batch hold several
		for _, e := range evs {
			l, ok := last[e.AgentID]
			if !ok {
				if err := c.get(ctx, []any{&l}, lastSeq, e.AgentID); err != nil {
					return fmt.Errorf("agent %q: %w", e.AgentID, notFound(err))
				}
			}
			if e.Seq != l+1 {
				return fmt.Errorf("event %d of agent %q after %d: %w", e.Seq, e.AgentID, l, store.ErrConflict)
			}
			last[e.AgentID] = e.Seq
			if _, err := c.exec(ctx, `INSERT INTO events (agent_id, seq, turn, kind, data, time) VALUES (?, ?, ?, ?, ?, ?)`,
				e.AgentID, e.Seq, e.Turn, e.Kind, jsonArg(e.Data), timeArg(e.Time)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: append events: %w", err)
	}
	return nil
}

func eventCols(e *store.Event) []any {
	return []any{&e.AgentID, &e.Seq, &e.Turn, &e.Kind, jsonCol{&e.Data}, timeCol{&e.Time}}
}

// Events reads all events after after when limit <= 0.
func (s *Store) Events(ctx context.Context, agentID string, turn int, after int64, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	const cols = `SELECT agent_id, seq, turn, kind, data, time FROM events `
	var evs []store.Event
	var err error
	if turn > 0 {
		evs, err = query(ctx, s, eventCols, cols+`WHERE agent_id = ? AND turn = ? AND seq > ? ORDER BY seq LIMIT ?`, agentID, turn, after, limit)
	} else {
		evs, err = query(ctx, s, eventCols, cols+`WHERE agent_id = ? AND seq > ? ORDER BY seq LIMIT ?`, agentID, after, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: events of agent %q: %w", agentID, err)
	}
	return evs, nil
}

// LastSeq: ErrNotFound when the agent is absent.
func (s *Store) LastSeq(ctx context.Context, agentID string) (int64, error) {
	var last int64
	if err := s.get(ctx, []any{&last}, lastSeq, agentID); err != nil {
		return 0, fmt.Errorf("sqlite: last seq of agent %q: %w", agentID, notFound(err))
	}
	return last, nil
}

const tokenColumns = `id, hash, tenant, scopes, expires, created, revoked`

func tokenCols(t *store.Token) []any {
	return []any{&t.ID, &t.Hash, &t.Tenant, scopesCol{&t.Scopes}, timeCol{&t.Expires}, timeCol{&t.Created}, timeCol{&t.Revoked}}
}

func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	n, err := s.exec(ctx, `INSERT INTO tokens (`+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		t.ID, t.Hash, t.Tenant, scopesArg(t.Scopes), timeArg(t.Expires), timeArg(t.Created), timeArg(t.Revoked))
	if err == nil && n == 0 {
		err = store.ErrConflict // the id or the hash
	}
	if err != nil {
		return fmt.Errorf("sqlite: create token %q: %w", t.ID, err)
	}
	return nil
}

func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	var t store.Token
	if err := s.get(ctx, tokenCols(&t), `SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`, hash); err != nil {
		return store.Token{}, fmt.Errorf("sqlite: token by hash: %w", notFound(err))
	}
	return t, nil
}

func (s *Store) ListTokens(ctx context.Context, tenant string) ([]store.Token, error) {
	var ts []store.Token
	var err error
	if tenant == "" {
		ts, err = query(ctx, s, tokenCols, `SELECT `+tokenColumns+` FROM tokens ORDER BY created, rowid`)
	} else {
		ts, err = query(ctx, s, tokenCols, `SELECT `+tokenColumns+` FROM tokens WHERE tenant = ? ORDER BY created, rowid`, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: list tokens: %w", err)
	}
	return ts, nil
}

func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time) error {
	n, err := s.exec(ctx, `UPDATE tokens SET revoked = coalesce(revoked, ?2) WHERE id = ?1`, id, timeArg(at))
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("sqlite: revoke token %q: %w", id, err)
	}
	return nil
}

const idempotencyColumns = `tenant, key, route, ref, created`

func idempotencyCols(k *store.Idempotency) []any {
	return []any{&k.Tenant, &k.Key, &k.Route, &k.Ref, timeCol{&k.Created}}
}

func (s *Store) ClaimIdempotency(ctx context.Context, k store.Idempotency) (store.Idempotency, bool, error) {
	held, claimed := k, false
	held.Created = stored(k.Created)
	err := s.write(ctx, func(c *conn) error {
		n, err := c.exec(ctx, `INSERT INTO idempotency (`+idempotencyColumns+`) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			k.Tenant, k.Key, k.Route, k.Ref, timeArg(k.Created))
		if err != nil || n == 1 {
			claimed = n == 1
			return err
		}
		return c.get(ctx, idempotencyCols(&held), `SELECT `+idempotencyColumns+` FROM idempotency WHERE tenant = ? AND key = ?`, k.Tenant, k.Key)
	})
	if err != nil {
		return store.Idempotency{}, false, fmt.Errorf("sqlite: claim idempotency key %q: %w", k.Key, err)
	}
	return held, claimed, nil
}

// SetIdempotencyRef: ErrNotFound when the key is not claimed.
func (s *Store) SetIdempotencyRef(ctx context.Context, tenant, key, ref string) error {
	n, err := s.exec(ctx, `UPDATE idempotency SET ref = ? WHERE tenant = ? AND key = ?`, ref, tenant, key)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("sqlite: set idempotency ref of %q: %w", key, err)
	}
	return nil
}

func (s *Store) ReleaseIdempotency(ctx context.Context, tenant, key string) error {
	if _, err := s.exec(ctx, `DELETE FROM idempotency WHERE tenant = ? AND key = ?`, tenant, key); err != nil {
		return fmt.Errorf("sqlite: release idempotency key %q: %w", key, err)
	}
	return nil
}

// AcquireLease: ErrNotFound when the agent is absent.
func (s *Store) AcquireLease(ctx context.Context, agentID, holder string, ttl time.Duration) (store.Lease, error) {
	var l store.Lease
	err := s.write(ctx, func(c *conn) error {
		var cur *string
		var expires *int64
		if err := c.get(ctx, []any{&cur, &expires}, `SELECT l.holder, l.expires
			FROM agents a LEFT JOIN leases l ON l.agent_id = a.id WHERE a.id = ?`, agentID); err != nil {
			return notFound(err)
		}
		t := now()
		if cur != nil && *cur != holder && *expires > t.UnixMicro() {
			l = store.Lease{AgentID: agentID, Holder: *cur, Expires: time.UnixMicro(*expires).UTC()}
			return store.ErrLeaseHeld
		}
		l = store.Lease{AgentID: agentID, Holder: holder, Expires: stored(t.Add(ttl))}
		_, err := c.exec(ctx, `INSERT INTO leases (agent_id, holder, expires) VALUES (?, ?, ?)
			ON CONFLICT (agent_id) DO UPDATE SET holder = excluded.holder, expires = excluded.expires`,
			agentID, holder, l.Expires.UnixMicro())
		return err
	})
	if err != nil {
		if !errors.Is(err, store.ErrLeaseHeld) {
			l = store.Lease{}
		}
		return l, fmt.Errorf("sqlite: acquire lease of agent %q: %w", agentID, err)
	}
	return l, nil
}

func (s *Store) ReleaseLease(ctx context.Context, agentID, holder string) error {
	if _, err := s.exec(ctx, `DELETE FROM leases WHERE agent_id = ? AND holder = ?`, agentID, holder); err != nil {
		return fmt.Errorf("sqlite: release lease of agent %q: %w", agentID, err)
	}
	return nil
}

var addSpendSQL = store.AddSpendSQL(func(int) string { return "?" })

func (s *Store) AddSpend(ctx context.Context, sp store.Spend) (store.Spend, error) {
	out := store.Spend{Scope: sp.Scope, Period: stored(sp.Period)}
	err := s.write(ctx, func(c *conn) error {
		return c.get(ctx, out.CountFields(), addSpendSQL, append([]any{sp.Scope, periodArg(sp.Period)}, sp.Counts()...)...)
	})
	if err != nil {
		return store.Spend{}, fmt.Errorf("sqlite: add spend of %q: %w", sp.Scope, err)
	}
	return out, nil
}

func (s *Store) GetSpend(ctx context.Context, scope string, period time.Time) (store.Spend, error) {
	out := store.Spend{Scope: scope, Period: stored(period)}
	err := s.read(ctx, func(c *conn) error {
		err := c.get(ctx, out.CountFields(), `SELECT `+strings.Join(store.SpendColumns, ", ")+` FROM spend WHERE scope = ? AND period = ?`, scope, periodArg(period))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return store.Spend{}, fmt.Errorf("sqlite: spend of %q: %w", scope, err)
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
