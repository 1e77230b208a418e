package postgres

import (
	"context"
	"fmt"

	"github.com/sandbox-agent/sandbox-agent/store"
)

const checkpointColumns = `id, tenant, agent_id, created, size, data`

func checkpointCols(c *store.Checkpoint) []any {
	return []any{&c.ID, &c.Tenant, &c.AgentID, timeCol{&c.Created}, &c.Size, (*[]byte)(&c.Data)}
}

func (s *Store) PutCheckpoint(ctx context.Context, c store.Checkpoint) error {
	tag, err := s.pool.Exec(ctx, `INSERT INTO checkpoints (`+checkpointColumns+`) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
		c.ID, c.Tenant, c.AgentID, timeArg(c.Created), c.Size, jsonArg(c.Data))
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrConflict
	}
	if err != nil {
		return fmt.Errorf("postgres: put checkpoint %q: %w", c.ID, err)
	}
	return nil
}

func (s *Store) Checkpoint(ctx context.Context, id string) (store.Checkpoint, error) {
	var c store.Checkpoint
	if err := s.pool.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM checkpoints WHERE id = $1`, id).Scan(checkpointCols(&c)...); err != nil {
		return store.Checkpoint{}, fmt.Errorf("postgres: get checkpoint %q: %w", id, notFound(err))
	}
	return c, nil
}

func (s *Store) Checkpoints(ctx context.Context, tenant string) ([]store.Checkpoint, error) {
	var cs []store.Checkpoint
	var err error
	if tenant == "" {
		cs, err = list(ctx, s, checkpointCols, `SELECT `+checkpointColumns+` FROM checkpoints ORDER BY created NULLS FIRST, seq`)
	} else {
		cs, err = list(ctx, s, checkpointCols, `SELECT `+checkpointColumns+` FROM checkpoints WHERE tenant = $1 ORDER BY created NULLS FIRST, seq`, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: list checkpoints: %w", err)
	}
	return cs, nil
}

func (s *Store) DeleteCheckpoint(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM checkpoints WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("postgres: delete checkpoint %q: %w", id, err)
	}
	return nil
}
