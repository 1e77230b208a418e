//go:build postgres

package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/store"
	"github.com/sandbox-agent/sandbox-agent/store/storetest"
)

const dsnEnv = "SANDBOX_AGENT_TEST_POSTGRES"

// freshDB creates a database for t alone (dropped when t ends) and
// returns its DSN. The role of SANDBOX_AGENT_TEST_POSTGRES must be
// allowed to create databases.
func freshDB(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		prereq.Missing(t, "%s is not set (a DSN; bash .ci/postgres.sh start prints one)", dsnEnv)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "sa_test_" + hex.EncodeToString(b)
	admin := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := admin("CREATE DATABASE " + name); err != nil {
		t.Fatalf("%s: %v", dsnEnv, err)
	}
	t.Cleanup(func() {
		// A backend still closing can make one attempt fail.
		var err error
		for try := 0; try < 5; try++ {
			if err = admin("DROP DATABASE " + name + " WITH (FORCE)"); err == nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("drop the test database: %v", err)
	})
	// A few connections per pool: the tests run in parallel.
	return withParams(t, dsn, map[string]string{"dbname": name, "pool_max_conns": "4"})
}

// withParams sets keys of a URL or key=value DSN (dbname: the URL's path).
func withParams(t testing.TB, dsn string, kv map[string]string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("%s: %v", dsnEnv, err)
		}
		q := u.Query()
		for k, v := range kv {
			if k == "dbname" {
				u.Path = "/" + v
			} else {
				q.Set(k, v)
			}
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	for k, v := range kv {
		dsn += " " + k + "=" + v // the last of a key wins
	}
	return dsn
}

func open(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openPair opens two Stores on dsn at once: both migrate it, racing.
func openPair(t testing.TB, dsn string) (*Store, *Store) {
	t.Helper()
	var s [2]*Store
	var errs [2]error
	var wg sync.WaitGroup
	for i := range s {
		wg.Go(func() { s[i], errs[i] = Open(context.Background(), dsn) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, o := range s {
				if o != nil {
					o.Close()
				}
			}
			t.Fatalf("Open %d: %v", i, err)
		}
	}
	return s[0], s[1]
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, freshDB(t)) })
}

// The contract holds across two replicas: every other call goes to the
// other pool.
func TestContractTwoPools(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		a, b := openPair(t, freshDB(t))
		return storetest.Alternate(a, b)
	})
}

func TestTwoPools(t *testing.T) {
	ctx := t.Context()
	a, b := openPair(t, freshDB(t))
	defer a.Close()
	defer b.Close()

	// Each migration applied once, though both ran them.
	var versions, distinct, known int
	if err := a.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT version), max(version) FROM schema_migrations`).
		Scan(&versions, &distinct, &known); err != nil || versions != distinct || known != versions {
		t.Errorf("schema_migrations: %d rows, %d versions, up to %d; %v", versions, distinct, known, err)
	}

	if err := a.CreateAgent(ctx, store.Agent{ID: "x", Tenant: "t"}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetAgent(ctx, "x"); err != nil || got.Tenant != "t" {
		t.Fatalf("the other pool: %+v, %v", got, err)
	}
	if err := b.UpdateAgent(ctx, store.Agent{ID: "x", Tenant: "t", Status: "busy"}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.GetAgent(ctx, "x"); err != nil || got.Status != "busy" {
		t.Errorf("the first pool after the other's update: %+v, %v", got, err)
	}

	// Lease race across the two: exactly one winner.
	stores := []*Store{a, b}
	for round := range 10 {
		id := fmt.Sprintf("race%d", round)
		if err := a.CreateAgent(ctx, store.Agent{ID: id}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var winners []string
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 8 {
			wg.Go(func() {
				<-start
				holder := fmt.Sprintf("replica%d-%d", i%2, i)
				l, err := stores[i%2].AcquireLease(ctx, id, holder, time.Minute)
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, holder)
					mu.Unlock()
				case !errors.Is(err, store.ErrLeaseHeld) || l.Holder == "" || l.Holder == holder:
					t.Errorf("AcquireLease by %s: %+v, %v", holder, l, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Errorf("round %d: winners %v", round, winners)
		}
	}
}

// A database a newer binary migrated is refused.
func TestSchemaTooNew(t *testing.T) {
	dsn := freshDB(t)
	s := open(t, dsn)
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version) VALUES (999)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(t.Context(), dsn)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Open of a database at version 999: %v, want ErrSchemaTooNew", err)
	}
	if err == nil {
		s2.Close()
	}
}

func BenchmarkTurnWrites(b *testing.B) {
	s := open(b, freshDB(b))
	defer s.Close()
	storetest.TurnWrites(b, s)
}
