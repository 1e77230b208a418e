// Package migrate reads a backend's embedded schema migrations: files
// NNNN_name.sql, numbered from 1 without a gap. Each backend applies them
// itself (one transaction each, recorded in schema_migrations); this is
// the part they share.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/sandbox-agent/sandbox-agent/store"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string // file name, for errors
	SQL     string
}

// Load reads the *.sql files of dir in fsys, in version order.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migrations: %s: want NNNN_name.sql", e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		// A gap or a duplicate would make "the database is at version n"
		// ambiguous.
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: %s: want version %d", m.Name, i+1)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("migrations: none in %s", dir)
	}
	return ms, nil
}

// Next is the migration to apply to a database at version current (the
// highest in its schema_migrations, 0 for a new one): nil when it is up
// to date, store.ErrSchemaTooNew when it is ahead of ms.
func Next(ms []Migration, current int) (*Migration, error) {
	switch {
	case current > len(ms):
		return nil, fmt.Errorf("%w: the database is at version %d, this binary knows up to %d (upgrade sandbox-agent; it never downgrades a database)",
			store.ErrSchemaTooNew, current, len(ms))
	case current == len(ms):
		return nil, nil
	default:
		return &ms[current], nil
	}
}
