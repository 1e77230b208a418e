// Package store is the durable state of sandbox-agent serve: its agents,
// their turns and events, tenants' tokens, idempotency keys, the turn
// leases that let several server replicas drive one agent in turn, and
// the agents' checkpoints.
//
// Store is the one interface; store/sqlite (embedded, the default) and
// store/postgres (for several replicas) implement it, and both pass the
// contract suite in store/storetest. Every method is one transaction: a
// crash leaves a record written whole or not at all.
//
// What a store holds is sensitive (the model proxy's per-agent token, the
// hashes of API tokens); it never holds an upstream API key. Values the
// server keeps (CreateRequest, turn results, events) are opaque JSON here.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors callers branch on (wrapped: use errors.Is).
var (
	// ErrNotFound: no record with that key.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a record with that key exists already.
	ErrConflict = errors.New("store: already exists")
	// ErrLeaseHeld: another holder's lease on the agent has not expired.
	ErrLeaseHeld = errors.New("store: lease held by another")
)

// Agent is one agent of the server.
type Agent struct {
	ID     string
	Tenant string
	// Request is the create request as the server received it (the
	// server strips env values before storing it).
	Request json.RawMessage
	Driver  string
	Model   string
	Image   string
	// Engine names the runtime the sandbox runs on ("docker",
	// "podman", "kubernetes").
	Engine      string
	SandboxID   string
	SandboxName string
	SessionID   string
	// Status is the server's word: "idle", "busy", "lost", ...
	Status string
	// Reason says why, for a lost agent (the engine's words).
	Reason string
	// Adopt is what the library needs to re-attach to the running sandbox
	// (sandboxagent.AgentState as JSON: the model proxy's token, the
	// socket folder, ...).
	Adopt json.RawMessage
	// Turns is the number of the agent's latest turn (0: none yet).
	Turns int
	// Owner is the server instance that started the agent or adopted it
	// last.
	Owner   string
	Created time.Time
	Updated time.Time
}

// Turn is one turn of an agent, numbered from 1.
type Turn struct {
	AgentID string
	N       int
	Prompt  string
	// Status: "running", "done", "failed" or "interrupted".
	Status string
	// Result is the server's JSON of the turn (without its events).
	Result  json.RawMessage
	Started time.Time
	Ended   time.Time // zero while it runs
}

// Event is one message of an agent's journal: a turn's start, one of its
// events, its end. Seq numbers an agent's events from 1, in order, with
// no gap (the SSE id).
type Event struct {
	AgentID string
	Seq     int64
	Turn    int
	Kind    string // "turn_start", "event", "turn_end"
	Data    json.RawMessage
	Time    time.Time
}

// Token is an API token. The store keeps its hash, never the token.
type Token struct {
	ID     string // public handle, shown by token list
	Hash   string // hex SHA-256 of the token
	Tenant string
	Scopes []string
	// Expires is zero for a token that does not expire.
	Expires time.Time
	Created time.Time
	Revoked time.Time // zero while valid
}

// Idempotency ties a client's Idempotency-Key to what it created.
type Idempotency struct {
	Tenant string
	Key    string
	// Route names what the key was used for ("create_agent",
	// "turn:<agent id>"): the same key on another route is a conflict.
	Route string
	// Ref is what the first request made (an agent id, a turn number).
	Ref     string
	Created time.Time
}

// Lease is a holder's right to run a turn on an agent until Expires.
type Lease struct {
	AgentID string
	Holder  string
	Expires time.Time
}

// Spend is what a metered scope (a tenant's budget) used in one period,
// summed over every process that shares the store. Counts stop at the
// largest int64.
type Spend struct {
	Scope string
	// Period is the start of the period (the zero time: a budget without
	// one), UTC, to the microsecond.
	Period           time.Time
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	UnpricedTokens   int64
	Requests         int64
	// CostNanoUSD is the priced usage's cost in billionths of a dollar
	// (integers: sums that do not drift across replicas).
	CostNanoUSD int64
}

// Checkpoint is a whole sandbox an agent of the server kept (POST
// .../checkpoints, .../fork): the record of an engine image or an archive
// folder, which outlives its agent.
type Checkpoint struct {
	ID     string
	Tenant string
	// AgentID is the agent checkpointed (it may be gone since).
	AgentID string
	Created time.Time
	// Size is the checkpoint's bytes (what it adds to its base image).
	Size int64
	// Data is the checkpoint as the library describes it
	// (sandboxagent.Checkpoint as JSON).
	Data json.RawMessage
}

// Store is the server's durable state. Implementations are safe for
// concurrent use, by one process and by several sharing the database.
type Store interface {
	// CreateAgent adds a; ErrConflict when its ID exists.
	CreateAgent(ctx context.Context, a Agent) error
	// UpdateAgent replaces the agent with a.ID; ErrNotFound when absent.
	UpdateAgent(ctx context.Context, a Agent) error
	GetAgent(ctx context.Context, id string) (Agent, error)
	// ListAgents lists the agents of tenant ("" lists every tenant's),
	// oldest first.
	ListAgents(ctx context.Context, tenant string) ([]Agent, error)
	// DeleteAgent removes the agent with its turns, events, lease and
	// idempotency keys that refer to it; ErrNotFound when absent.
	DeleteAgent(ctx context.Context, id string) error

	// PutTurn adds or replaces the turn (AgentID, N), and raises the
	// agent's Turns to N when lower; ErrNotFound when the agent is absent.
	PutTurn(ctx context.Context, t Turn) error
	GetTurn(ctx context.Context, agentID string, n int) (Turn, error)
	// ListTurns lists an agent's turns, oldest first.
	ListTurns(ctx context.Context, agentID string) ([]Turn, error)

	// AppendEvents adds events in order; each Seq must follow the
	// agent's last (LastSeq + 1, no gap), else ErrConflict and nothing
	// is written. ErrNotFound when the agent is absent.
	AppendEvents(ctx context.Context, evs []Event) error
	// Events returns up to limit events of the agent with Seq > after,
	// in order; turn > 0 selects that turn's only.
	Events(ctx context.Context, agentID string, turn int, after int64, limit int) ([]Event, error)
	// LastSeq is the agent's latest event's Seq (0: none).
	LastSeq(ctx context.Context, agentID string) (int64, error)

	// CreateToken adds t; ErrConflict when its ID or Hash exists.
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token (revoked and expired ones too: the
	// caller decides); ErrNotFound when none.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// ListTokens lists tokens of tenant ("" every tenant's), oldest
	// first.
	ListTokens(ctx context.Context, tenant string) ([]Token, error)
	// RevokeToken marks the token revoked at the given time; ErrNotFound
	// when absent. Revoking twice keeps the first time.
	RevokeToken(ctx context.Context, id string, at time.Time) error

	// ClaimIdempotency records k unless (k.Tenant, k.Key) exists: it
	// returns the record that holds the key and whether it is k (true:
	// the caller goes on and later sets Ref with SetIdempotencyRef).
	ClaimIdempotency(ctx context.Context, k Idempotency) (Idempotency, bool, error)
	// SetIdempotencyRef sets the Ref of a claimed key.
	SetIdempotencyRef(ctx context.Context, tenant, key, ref string) error
	// ReleaseIdempotency forgets a claimed key (the request it guarded
	// failed: a retry may try again).
	ReleaseIdempotency(ctx context.Context, tenant, key string) error

	// AcquireLease gives holder the agent's lease until now+ttl when it
	// is free, expired or already holder's (a renewal); else
	// ErrLeaseHeld, with the current lease. The database's clock decides
	// expiry, so replicas need not agree on time.
	AcquireLease(ctx context.Context, agentID, holder string, ttl time.Duration) (Lease, error)
	// ReleaseLease frees the lease if holder holds it (no error when not).
	ReleaseLease(ctx context.Context, agentID, holder string) error

	// AddSpend adds s's counts (negative ones as zero) to its scope's
	// period, atomically, and returns the new total.
	AddSpend(ctx context.Context, s Spend) (Spend, error)
	// GetSpend is a scope's total for a period (zero counts when nothing
	// was added).
	GetSpend(ctx context.Context, scope string, period time.Time) (Spend, error)

	// PutCheckpoint adds the checkpoint; ErrConflict when one with its ID
	// exists (it is left as it was).
	PutCheckpoint(ctx context.Context, c Checkpoint) error
	// Checkpoint returns the checkpoint with that ID; ErrNotFound when
	// absent.
	Checkpoint(ctx context.Context, id string) (Checkpoint, error)
	// Checkpoints lists the checkpoints of tenant ("" every tenant's),
	// oldest first.
	Checkpoints(ctx context.Context, tenant string) ([]Checkpoint, error)
	// DeleteCheckpoint removes the checkpoint's record; ErrNotFound when
	// absent.
	DeleteCheckpoint(ctx context.Context, id string) error

	Close() error
}

// SpendColumns are the spend table's count columns, in the order of
// Spend.Counts and Spend.CountFields.
var SpendColumns = []string{"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "unpriced_tokens", "requests", "cost_nano_usd"}

// Counts are s's counts in SpendColumns' order, negative ones as zero:
// what AddSpend adds.
func (s Spend) Counts() []any {
	out := make([]any, 0, len(SpendColumns))
	for _, v := range []int64{s.InputTokens, s.OutputTokens, s.CacheReadTokens, s.CacheWriteTokens, s.UnpricedTokens, s.Requests, s.CostNanoUSD} {
		out = append(out, max(v, 0))
	}
	return out
}

// CountFields point at s's counts in SpendColumns' order (for Scan).
func (s *Spend) CountFields() []any {
	return []any{&s.InputTokens, &s.OutputTokens, &s.CacheReadTokens, &s.CacheWriteTokens, &s.UnpricedTokens, &s.Requests, &s.CostNanoUSD}
}

// AddSpendSQL is the statement both stores run for AddSpend, with
// placeholder(i) (1-based) for the driver's parameters: scope, period,
// then the counts. Each sum stops at the largest int64 (a hostile
// upstream's counts must not wrap a budget's total, nor fail the write).
func AddSpendSQL(placeholder func(int) string) string {
	var cols, vals, set, ret strings.Builder
	vals.WriteString(placeholder(1) + ", " + placeholder(2))
	for i, c := range SpendColumns {
		sep := ", "
		if i == 0 {
			sep = ""
		}
		cols.WriteString(", " + c)
		vals.WriteString(", " + placeholder(i+3))
		fmt.Fprintf(&set, "%s%[2]s = CASE WHEN spend.%[2]s > 9223372036854775807 - excluded.%[2]s THEN 9223372036854775807 ELSE spend.%[2]s + excluded.%[2]s END", sep, c)
		ret.WriteString(sep + c)
	}
	return "INSERT INTO spend (scope, period" + cols.String() + ") VALUES (" + vals.String() + ") ON CONFLICT (scope, period) DO UPDATE SET " + set.String() + " RETURNING " + ret.String()
}
