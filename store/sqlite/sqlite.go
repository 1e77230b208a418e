// Package sqlite is the embedded store of sandbox-agent serve: one SQLite
// file, through the pure-Go modernc.org/sqlite (no cgo), for a server of
// one replica. Several replicas share store/postgres instead.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"modernc.org/sqlite" // the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sandbox-agent/sandbox-agent/store"
	"github.com/sandbox-agent/sandbox-agent/store/internal/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Memory is the path of a private in-memory database: gone at Close.
const Memory = ":memory:"

// Store is a store.Store in one SQLite database.
type Store struct {
	// writer holds the one writing connection: SQLite runs one writer at
	// a time anyway, and one connection makes writers queue in Go rather
	// than spin on SQLITE_BUSY.
	writer chan *conn
	// readers hold the connections that read beside the writer (WAL lets
	// them); it is writer itself for an in-memory database, which exists
	// only on its one connection.
	readers chan *conn
	nread   int
	dbs     []*sql.DB

	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// errClosed: a call after Close.
var errClosed = errors.New("sqlite: store closed")

// Open opens the database at path, creating it (mode 0600: it holds
// secrets) when absent, and brings its schema up to date. Its folder must
// exist. Memory (":memory:") opens a private in-memory database.
func Open(ctx context.Context, path string) (*Store, error) {
	params := url.Values{
		"_pragma": {
			"busy_timeout(10000)", // another process on the file: wait, not fail
			"foreign_keys(1)",     // the cascades of DeleteAgent
			"journal_mode(WAL)",
			// NORMAL in WAL mode syncs at checkpoints, not at each commit:
			// a crash of the process loses nothing, a power cut loses at
			// most the last commits, and the database stays whole either
			// way. FULL would put an fsync (milliseconds) on every write
			// of a turn.
			"synchronous(NORMAL)",
		},
	}
	var wdsn, rdsn string
	if path == Memory {
		wdsn = Memory + "?" + params.Encode()
	} else {
		if err := createFile(path); err != nil {
			return nil, err
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		// A URI, so that a path with '?' or '%' stays one path.
		uri := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?"
		wdsn = uri + params.Encode()
		rdsn = uri + url.Values{"_pragma": {"busy_timeout(10000)", "query_only(1)"}}.Encode()
	}

	s := &Store{writer: make(chan *conn, 1)}
	w, err := s.connect(ctx, wdsn, 1)
	// Switching a new file to WAL takes its lock without the busy
	// handler: another process opening it at the same moment waits here.
	for try := 0; err != nil && isBusy(err) && try < 100 && ctx.Err() == nil; try++ {
		time.Sleep(20 * time.Millisecond)
		w, err = s.connect(ctx, wdsn, 1)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.writer <- w[0]
	s.readers, s.nread = s.writer, 0
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	if rdsn != "" {
		n := min(max(4, runtime.GOMAXPROCS(0)), 16) // each has its own page cache
		rs, err := s.connect(ctx, rdsn, n)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		s.readers, s.nread = make(chan *conn, n), n
		for _, r := range rs {
			s.readers <- r
		}
	}
	return s, nil
}

// isBusy: the database is locked by another connection.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// connect opens n connections to dsn, held for the life of the Store.
func (s *Store) connect(ctx context.Context, dsn string, n int) ([]*conn, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	var cs []*conn
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			for _, c := range cs {
				c.c.Close()
			}
			db.Close()
			return nil, err
		}
		cs = append(cs, &conn{c: c, stmts: map[string]*sql.Stmt{}})
	}
	s.dbs = append(s.dbs, db)
	return cs, nil
}

// createFile creates the database file 0600 before SQLite does (SQLite
// would follow the umask; its -wal and -shm files copy the database
// file's mode).
func createFile(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("sqlite: the folder of the database: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("sqlite: the folder of the database: %w", &fs.PathError{Op: "stat", Path: dir, Err: syscall.ENOTDIR})
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return f.Close()
}

// migrate applies the migrations the database lacks, one transaction
// each; BEGIN IMMEDIATE makes a second process opening the file at the
// same time wait and then find them applied.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrate.Load(migrations, "migrations")
	if err != nil {
		return err
	}
	for done := false; !done; {
		err := s.write(ctx, func(c *conn) error {
			if _, err := c.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version INTEGER PRIMARY KEY,
				applied INTEGER NOT NULL)`); err != nil {
				return err
			}
			var current int
			if err := c.get(ctx, []any{&current}, `SELECT coalesce(max(version), 0) FROM schema_migrations`); err != nil {
				return err
			}
			m, err := migrate.Next(ms, current)
			if err != nil || m == nil {
				done = true
				return err
			}
			if _, err := c.c.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			_, err = c.exec(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`, m.Version, timeArg(now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	return nil
}

// Close waits for the calls under way and closes the database (an
// in-memory one is gone). Calls after it fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		closeAll := func(ch chan *conn, n int) {
			for range n {
				c := <-ch
				for _, st := range c.stmts {
					errs = append(errs, st.Close())
				}
				errs = append(errs, c.c.Close())
			}
			close(ch)
		}
		if s.readers != s.writer {
			closeAll(s.readers, s.nread)
		}
		closeAll(s.writer, 1)
		for _, db := range s.dbs {
			errs = append(errs, db.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// conn is one connection and the statements prepared on it (SQLite
// compiles a statement in tens of microseconds; a turn runs a few dozen).
// One goroutine has it at a time: it lives in a channel.
type conn struct {
	c     *sql.Conn
	stmts map[string]*sql.Stmt
}

func take(ctx context.Context, ch chan *conn) (*conn, error) {
	select {
	case c, ok := <-ch:
		if !ok {
			return nil, errClosed
		}
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// read runs f on a reading connection.
func (s *Store) read(ctx context.Context, f func(*conn) error) error {
	c, err := take(ctx, s.readers)
	if err != nil {
		return err
	}
	defer func() { s.readers <- c }()
	return f(c)
}

// exec runs one write statement (a transaction by itself) and returns
// how many rows it changed.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	c, err := take(ctx, s.writer)
	if err != nil {
		return 0, err
	}
	defer func() { s.writer <- c }()
	return c.exec(ctx, query, args...)
}

// get reads one row into dest; sql.ErrNoRows when there is none.
func (s *Store) get(ctx context.Context, dest []any, query string, args ...any) error {
	return s.read(ctx, func(c *conn) error { return c.get(ctx, dest, query, args...) })
}

// query reads rows, each into the fields of a T that cols names.
func query[T any](ctx context.Context, s *Store, cols func(*T) []any, q string, args ...any) ([]T, error) {
	var out []T
	err := s.read(ctx, func(c *conn) error {
		var err error
		out, err = list(ctx, c, cols, q, args...)
		return err
	})
	return out, err
}

// write runs f in a transaction on the writer: committed when f returns
// nil, else rolled back.
func (s *Store) write(ctx context.Context, f func(*conn) error) error {
	c, err := take(ctx, s.writer)
	if err != nil {
		return err
	}
	defer func() { s.writer <- c }()
	if _, err := c.exec(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	if err = f(c); err == nil {
		_, err = c.exec(ctx, `COMMIT`)
	}
	if err != nil {
		// Even when ctx is done: the connection must not stay in the
		// transaction. (SQLite may have rolled back already; the error
		// then says so and means nothing.)
		c.exec(context.WithoutCancel(ctx), `ROLLBACK`)
	}
	return err
}

func (c *conn) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := c.stmts[query]; st != nil {
		return st, nil
	}
	st, err := c.c.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

// exec runs a statement and returns how many rows it changed.
func (c *conn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// get reads one row into dest; sql.ErrNoRows when there is none.
func (c *conn) get(ctx context.Context, dest []any, query string, args ...any) error {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return err
	}
	return st.QueryRowContext(ctx, args...).Scan(dest...)
}

// list reads rows, each into the fields of a T that cols names.
func list[T any](ctx context.Context, c *conn, cols func(*T) []any, query string, args ...any) ([]T, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
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

// notFound turns sql.ErrNoRows into store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}
