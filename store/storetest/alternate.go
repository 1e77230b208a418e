package storetest

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sandbox-agent/sandbox-agent/store"
)

// Alternate is one store.Store over several opened on the same database
// (as replicas, or processes, would): each call goes to the next in turn,
// so Run through it checks that the contract holds across them. Close
// closes them all.
func Alternate(stores ...store.Store) store.Store { return &alternate{stores: stores} }

type alternate struct {
	stores []store.Store
	n      atomic.Uint64
}

func (a *alternate) next() store.Store { return a.stores[a.n.Add(1)%uint64(len(a.stores))] }

func (a *alternate) CreateAgent(ctx context.Context, x store.Agent) error {
	return a.next().CreateAgent(ctx, x)
}
func (a *alternate) UpdateAgent(ctx context.Context, x store.Agent) error {
	return a.next().UpdateAgent(ctx, x)
}
func (a *alternate) GetAgent(ctx context.Context, id string) (store.Agent, error) {
	return a.next().GetAgent(ctx, id)
}
func (a *alternate) ListAgents(ctx context.Context, tenant string) ([]store.Agent, error) {
	return a.next().ListAgents(ctx, tenant)
}
func (a *alternate) DeleteAgent(ctx context.Context, id string) error {
	return a.next().DeleteAgent(ctx, id)
}
func (a *alternate) PutTurn(ctx context.Context, t store.Turn) error { return a.next().PutTurn(ctx, t) }
func (a *alternate) GetTurn(ctx context.Context, agentID string, n int) (store.Turn, error) {
	return a.next().GetTurn(ctx, agentID, n)
}
func (a *alternate) ListTurns(ctx context.Context, agentID string) ([]store.Turn, error) {
	return a.next().ListTurns(ctx, agentID)
}
func (a *alternate) AppendEvents(ctx context.Context, evs []store.Event) error {
	return a.next().AppendEvents(ctx, evs)
}
func (a *alternate) Events(ctx context.Context, agentID string, turn int, after int64, limit int) ([]store.Event, error) {
	return a.next().Events(ctx, agentID, turn, after, limit)
}
func (a *alternate) LastSeq(ctx context.Context, agentID string) (int64, error) {
	return a.next().LastSeq(ctx, agentID)
}
func (a *alternate) CreateToken(ctx context.Context, t store.Token) error {
	return a.next().CreateToken(ctx, t)
}
func (a *alternate) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	return a.next().TokenByHash(ctx, hash)
}
func (a *alternate) ListTokens(ctx context.Context, tenant string) ([]store.Token, error) {
	return a.next().ListTokens(ctx, tenant)
}
func (a *alternate) RevokeToken(ctx context.Context, id string, at time.Time) error {
	return a.next().RevokeToken(ctx, id, at)
}
func (a *alternate) ClaimIdempotency(ctx context.Context, k store.Idempotency) (store.Idempotency, bool, error) {
	return a.next().ClaimIdempotency(ctx, k)
}
func (a *alternate) SetIdempotencyRef(ctx context.Context, tenant, key, ref string) error {
	return a.next().SetIdempotencyRef(ctx, tenant, key, ref)
}
func (a *alternate) ReleaseIdempotency(ctx context.Context, tenant, key string) error {
	return a.next().ReleaseIdempotency(ctx, tenant, key)
}
func (a *alternate) AcquireLease(ctx context.Context, agentID, holder string, ttl time.Duration) (store.Lease, error) {
	return a.next().AcquireLease(ctx, agentID, holder, ttl)
}
func (a *alternate) ReleaseLease(ctx context.Context, agentID, holder string) error {
	return a.next().ReleaseLease(ctx, agentID, holder)
}
func (a *alternate) AddSpend(ctx context.Context, sp store.Spend) (store.Spend, error) {
	return a.next().AddSpend(ctx, sp)
}
func (a *alternate) GetSpend(ctx context.Context, scope string, period time.Time) (store.Spend, error) {
	return a.next().GetSpend(ctx, scope, period)
}
func (a *alternate) PutCheckpoint(ctx context.Context, c store.Checkpoint) error {
	return a.next().PutCheckpoint(ctx, c)
}
func (a *alternate) Checkpoint(ctx context.Context, id string) (store.Checkpoint, error) {
	return a.next().Checkpoint(ctx, id)
}
func (a *alternate) Checkpoints(ctx context.Context, tenant string) ([]store.Checkpoint, error) {
	return a.next().Checkpoints(ctx, tenant)
}
func (a *alternate) DeleteCheckpoint(ctx context.Context, id string) error {
	return a.next().DeleteCheckpoint(ctx, id)
}

func (a *alternate) Close() error {
	var errs []error
	for _, s := range a.stores {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
