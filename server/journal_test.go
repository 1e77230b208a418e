package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/store"
)

// flakyStore fails AppendEvents once (a store that timed out for a moment).
type flakyStore struct {
	store.Store
	fail atomic.Int32
}

func (f *flakyStore) AppendEvents(ctx context.Context, evs []store.Event) error {
	if f.fail.Add(-1) >= 0 {
		return errors.New("transient: connection reset")
	}
	return f.Store.AppendEvents(ctx, evs)
}

// TestJournalTransientFailure: one failed append must not make every
// later append of the agent fail (ErrConflict: seq gap) for ever.
func TestJournalTransientFailure(t *testing.T) {
	base := testStore(t)
	storedAgent(t, base, "ag_a", AdminTenant) // events 1..3
	fs := &flakyStore{Store: base}
	j := newJournal(fs, "ag_a", 3, slog.Default())
	defer j.close()
	fs.fail.Store(1)
	j.add(2, "turn_start", turnStart{Turn: 2, Prompt: "p"}) // seq 4: fails
	j.sync()
	j.add(2, "event", map[string]string{"kind": "text"})   // seq 5
	j.add(2, "turn_end", turnResult{Turn: 2, Prompt: "p"}) // seq 6
	j.sync()
	last, err := base.LastSeq(context.Background(), "ag_a")
	if err != nil {
		t.Fatal(err)
	}
	if last != 6 {
		t.Errorf("after one transient failure the store's last seq is %d, want 6 (later events lost for good)", last)
	}
	if tr, err := base.GetTurn(context.Background(), "ag_a", 2); err != nil || tr.Status != turnDone {
		t.Errorf("turn 2: %+v %v, want done", tr.Status, err)
	}
}

// TestFollowTurnPastEnd: GET .../turns/{n} with a Last-Event-ID at or
// after the turn's end must answer, not wait for ever.
func TestFollowTurnPastEnd(t *testing.T) {
	st := testStore(t)
	ts := newTestServer(t, nil, func(o *Options) { o.Store = st; o.Exclusive = true })
	storedAgent(t, st, "ag_a", AdminTenant) // turn 1 ends at seq 3
	for _, sse := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/agents/ag_a/turns/1", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Last-Event-ID", "3") // the id of the result event the client got
		if sse {
			req.Header.Set("Accept", "text/event-stream")
		}
		start := time.Now()
		resp, err := ts.Client().Do(req)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		cancel()
		if err != nil || !strings.Contains(string(body), `"reply":"hi"`) {
			t.Errorf("sse=%v: after %v: err %v, body %q: want the turn's result", sse, time.Since(start).Round(time.Millisecond), err, body)
		}
	}
}
