// Package store is the durable state of sandbox-agent serve: its agents,
// their turns and events, tenants' tokens, idempotency keys and the turn
// leases that let several server replicas drive one agent in turn.
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

	Close() error
}
