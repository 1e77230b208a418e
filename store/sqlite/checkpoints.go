package sqlite

import (
	"context"
	"fmt"

	"github.com/sandbox-agent/sandbox-agent/store"
)

const checkpointColumns = `id, tenant, agent_id, created, size, data`

func checkpointCols(c *store.Checkpoint) []any {
	return []any{&c.ID, &c.Tenant, &c.AgentID, timeCol{&c.Created}, &c.Size, jsonCol{&c.Data}}
}

func (s *Store) PutCheckpoint(ctx context.Context, c store.Checkpoint) error {
	n, err := s.exec(ctx, `INSERT INTO checkpoints (`+checkpointColumns+`) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		c.ID, c.Tenant, c.AgentID, timeArg(c.Created), c.Size, jsonArg(c.Data))
	if err == nil && n == 0 {
		err = store.ErrConflict
	}
	if err != nil {
		return fmt.Errorf("sqlite: put checkpoint %q: %w", c.ID, err)
	}
	return nil
}

func (s *Store) Checkpoint(ctx context.Context, id string) (store.Checkpoint, error) {
	var c store.Checkpoint
	if err := s.get(ctx, checkpointCols(&c), `SELECT `+checkpointColumns+` FROM checkpoints WHERE id = ?`, id); err != nil {
		return store.Checkpoint{}, fmt.Errorf("sqlite: get checkpoint %q: %w", id, notFound(err))
	}
	return c, nil
}

func (s *Store) Checkpoints(ctx context.Context, tenant string) ([]store.Checkpoint, error) {
	var cs []store.Checkpoint
	var err error
	// rowid: insertion order among checkpoints made at the same time.
	if tenant == "" {
		cs, err = query(ctx, s, checkpointCols, `SELECT `+checkpointColumns+` FROM checkpoints ORDER BY created, rowid`)
	} else {
		cs, err = query(ctx, s, checkpointCols, `SELECT `+checkpointColumns+` FROM checkpoints WHERE tenant = ? ORDER BY created, rowid`, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: list checkpoints: %w", err)
	}
	return cs, nil
}

func (s *Store) DeleteCheckpoint(ctx context.Context, id string) error {
	n, err := s.exec(ctx, `DELETE FROM checkpoints WHERE id = ?`, id)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("sqlite: delete checkpoint %q: %w", id, err)
	}
	return nil
}
