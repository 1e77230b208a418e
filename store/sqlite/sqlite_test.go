package sqlite

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/store"
	"github.com/sandbox-agent/sandbox-agent/store/storetest"
)

func openT(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContractFile(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openT(t, filepath.Join(t.TempDir(), "state.db")) })
}

func TestContractMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openT(t, Memory) })
}

// The contract holds across two Stores on one file, as across two
// processes: every other call goes to the other.
func TestContractTwoStores(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		path := filepath.Join(t.TempDir(), "state.db")
		return storetest.Alternate(openT(t, path), openT(t, path))
	})
}

// Each in-memory Store is a database of its own.
func TestMemoryIsPrivate(t *testing.T) {
	ctx := t.Context()
	a, b := openT(t, Memory), openT(t, Memory)
	defer a.Close()
	defer b.Close()
	if err := a.CreateAgent(ctx, store.Agent{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetAgent(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another in-memory store sees the agent: %v", err)
	}
}

// The file and its -wal and -shm are 0600; the writer runs in WAL mode,
// synchronous=NORMAL, with foreign keys.
func TestFileSettings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openT(t, path)
	defer s.Close()
	var journal string
	var synchronous, foreignKeys int
	err := s.write(t.Context(), func(c *conn) error {
		return errors.Join(c.get(t.Context(), []any{&journal}, `PRAGMA journal_mode`),
			c.get(t.Context(), []any{&synchronous}, `PRAGMA synchronous`),
			c.get(t.Context(), []any{&foreignKeys}, `PRAGMA foreign_keys`))
	})
	if err != nil || journal != "wal" || synchronous != 1 || foreignKeys != 1 {
		t.Errorf("journal_mode %s, synchronous %d, foreign_keys %d; %v", journal, synchronous, foreignKeys, err)
	}
	// A write, so that the -wal file has content and -shm exists.
	if err := s.CreateAgent(t.Context(), store.Agent{ID: "x", Adopt: json.RawMessage(`{"token":"secret"}`)}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(f), m)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
	}{
		{filepath.Join(dir, "absent", "state.db"), fs.ErrNotExist},
		{filepath.Join(file, "state.db"), syscall.ENOTDIR},
	} {
		s, err := Open(t.Context(), tc.path)
		if !errors.Is(err, tc.want) {
			t.Errorf("Open(%s): %v, want %v", tc.path, err, tc.want)
		}
		if err == nil {
			s.Close()
		}
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openT(t, path)
	a := store.Agent{ID: "x", Tenant: "t", Status: "idle", Adopt: json.RawMessage(`{"k":1}`), Created: time.Now()}
	evs := []store.Event{{AgentID: "x", Seq: 1, Turn: 1, Kind: "turn_start", Data: json.RawMessage(`{}`), Time: time.Now()}}
	for _, err := range []error{
		s.CreateAgent(ctx, a),
		s.PutTurn(ctx, store.Turn{AgentID: "x", N: 1, Status: "running", Started: time.Now()}),
		s.AppendEvents(ctx, evs),
		s.CreateToken(ctx, store.Token{ID: "tk", Hash: "h", Tenant: "t"}),
		s.Close(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateAgent(ctx, store.Agent{ID: "y"}); err == nil {
		t.Error("CreateAgent after Close: no error")
	}

	s = openT(t, path)
	defer s.Close()
	got, err := s.GetAgent(ctx, "x")
	if err != nil || got.Turns != 1 || got.Status != "idle" || string(got.Adopt) != `{"k":1}` {
		t.Errorf("after reopening: %+v, %v", got, err)
	}
	if last, err := s.LastSeq(ctx, "x"); err != nil || last != 1 {
		t.Errorf("LastSeq after reopening = %d, %v", last, err)
	}
	if _, err := s.TokenByHash(ctx, "h"); err != nil {
		t.Errorf("TokenByHash after reopening: %v", err)
	}
	// Opening again applied no migration twice.
	var versions []int
	err = s.read(ctx, func(c *conn) error {
		var err error
		versions, err = list(ctx, c, func(v *int) []any { return []any{v} }, `SELECT version FROM schema_migrations ORDER BY version`)
		return err
	})
	if err != nil || len(versions) == 0 || versions[len(versions)-1] != len(versions) {
		t.Errorf("schema_migrations: %v, %v", versions, err)
	}
}

// Stores opening a new file at once (processes starting together) all
// migrate it, each migration once.
func TestConcurrentOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	stores := make([]*Store, 4)
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), path) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var rows, versions int
	if err := stores[0].get(t.Context(), []any{&rows, &versions}, `SELECT count(*), max(version) FROM schema_migrations`); err != nil || rows != versions {
		t.Errorf("schema_migrations: %d rows up to version %d; %v", rows, versions, err)
	}
}

// A database a newer binary migrated is refused, and left as it is.
func TestSchemaTooNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := openT(t, path).Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied) VALUES (999, 0)`); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), path)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Open of a database at version 999: %v, want ErrSchemaTooNew", err)
	}
	if err == nil {
		s.Close()
	} else if !strings.Contains(err.Error(), "999") {
		t.Errorf("the error does not name the version: %v", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM schema_migrations WHERE version = 999`).Scan(&n); err != nil || n != 1 {
		t.Errorf("version 999 is gone: %d, %v", n, err)
	}
	db.Close()
}

const crashEnv = "SANDBOX_AGENT_STORE_CRASH_CHILD"

// Batches of a turn's events in the crash test: whole or absent.
var crashBatches = []int{5, 7, 4}

// TestCrashSafety kills a process that writes turns in a loop (SIGKILL:
// no defer, no Close) a few times over, and checks after each what a
// reopened database holds: only whole records, every turn's events
// contiguous and in whole batches, a done turn with all of them.
func TestCrashSafety(t *testing.T) {
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(t, path)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	path := filepath.Join(t.TempDir(), "state.db")
	for round := range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashSafety$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it at a different point each round, once it has written
		// some turns.
		lines := bufio.NewScanner(out)
		for turns := 0; turns < 5+7*round && lines.Scan(); {
			if strings.HasPrefix(lines.Text(), "turn ") {
				turns++
			}
		}
		time.Sleep(time.Duration(round) * 300 * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: the child ended on its own: %v", round, err)
		}
		checkCrashed(t, path, round)
	}
}

// crashChild writes turns to path until it is killed, printing "turn N"
// after each.
func crashChild(t *testing.T, path string) {
	ctx := context.Background()
	s := openT(t, path)
	if err := s.CreateAgent(ctx, store.Agent{ID: "crash", Status: "idle"}); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatal(err)
	}
	a, err := s.GetAgent(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	seq, err := s.LastSeq(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	// A turn the last child was killed in is over, as the server would
	// mark it.
	if a.Turns > 0 {
		tr, err := s.GetTurn(ctx, "crash", a.Turns)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status == "running" {
			tr.Status, tr.Ended = "interrupted", time.Now()
			if err := s.PutTurn(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	data := json.RawMessage(`{"text":"` + strings.Repeat("x", 2000) + `"}`)
	for n := a.Turns + 1; ; n++ {
		tr := store.Turn{AgentID: "crash", N: n, Prompt: "p", Status: "running", Started: time.Now()}
		check := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		check(s.PutTurn(ctx, tr))
		for b, size := range crashBatches {
			var evs []store.Event
			for i := range size {
				seq++
				kind := "event"
				if b == 0 && i == 0 {
					kind = "turn_start"
				} else if b == len(crashBatches)-1 && i == size-1 {
					kind = "turn_end"
				}
				evs = append(evs, store.Event{AgentID: "crash", Seq: seq, Turn: n, Kind: kind, Data: data, Time: time.Now()})
			}
			check(s.AppendEvents(ctx, evs))
		}
		tr.Status, tr.Ended, tr.Result = "done", time.Now(), json.RawMessage(`{"ok":true}`)
		check(s.PutTurn(ctx, tr))
		a.Turns, a.Status, a.Updated = n, "idle", time.Now()
		check(s.UpdateAgent(ctx, a))
		fmt.Printf("turn %d\n", n)
	}
}

func checkCrashed(t *testing.T, path string, round int) {
	t.Helper()
	ctx := t.Context()
	s := openT(t, path)
	defer s.Close()
	var integrity string
	if err := s.get(ctx, []any{&integrity}, `PRAGMA integrity_check`); err != nil || integrity != "ok" {
		t.Fatalf("round %d: integrity_check: %q, %v", round, integrity, err)
	}
	a, err := s.GetAgent(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	turns, err := s.ListTurns(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, "crash", 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	byTurn := map[int][]store.Event{}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("round %d: event %d has seq %d", round, i, e.Seq)
		}
		if i > 0 && e.Turn < evs[i-1].Turn {
			t.Fatalf("round %d: seq %d of turn %d after turn %d: a turn's events are not contiguous", round, e.Seq, e.Turn, evs[i-1].Turn)
		}
		var d struct{ Text string }
		if err := json.Unmarshal(e.Data, &d); err != nil || len(d.Text) != 2000 {
			t.Fatalf("round %d: seq %d: half a record: %v", round, e.Seq, err)
		}
		byTurn[e.Turn] = append(byTurn[e.Turn], e)
	}
	whole := map[int]bool{0: true}
	sum := 0
	for _, b := range crashBatches {
		sum += b
		whole[sum] = true
	}
	for i, tr := range turns {
		if tr.N != i+1 {
			t.Fatalf("round %d: turn %d where %d belongs", round, tr.N, i+1)
		}
		got := byTurn[tr.N]
		if !whole[len(got)] {
			t.Errorf("round %d: turn %d has %d events: not whole batches", round, tr.N, len(got))
		}
		if tr.Status == "done" && (len(got) != sum || got[0].Kind != "turn_start" || got[len(got)-1].Kind != "turn_end") {
			t.Errorf("round %d: done turn %d has %d events", round, tr.N, len(got))
		}
		if tr.Status == "running" && i != len(turns)-1 {
			t.Errorf("round %d: turn %d is %q but not the last", round, tr.N, tr.Status)
		}
	}
	if a.Turns != len(turns) || len(byTurn) > len(turns) {
		t.Errorf("round %d: Agent.Turns %d, %d turns, events of %d turns", round, a.Turns, len(turns), len(byTurn))
	}
	t.Logf("round %d: %d turns, %d events, the last turn %s with %d events", round, len(turns), len(evs),
		turns[len(turns)-1].Status, len(byTurn[len(turns)]))
}

func BenchmarkTurnWrites(b *testing.B) {
	for _, tc := range []struct{ name, path string }{
		{"file", filepath.Join(b.TempDir(), "bench.db")},
		{"memory", Memory},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := openT(b, tc.path)
			defer s.Close()
			storetest.TurnWrites(b, s)
		})
	}
}
