// Package storetest is the contract suite of store.Store: every backend
// (store/sqlite, store/postgres) runs it, so they behave alike and the
// server need not care which one it has. Alternate runs it across several
// stores on one database; TurnWrites is the benchmark of a turn's writes.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/store"
)

// Run checks every documented behaviour of store.Store on stores from
// open, which returns a fresh, empty store each call. The subtests run in
// parallel; each closes its store when it ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s store.Store)
	}{
		{"Agents", testAgents},
		{"AgentZeroValues", testAgentZeroValues},
		{"ListAgents", testListAgents},
		{"DeleteAgentCascades", testDeleteAgentCascades},
		{"Turns", testTurns},
		{"TurnsRaiseConcurrently", testTurnsRaiseConcurrently},
		{"AppendEvents", testAppendEvents},
		{"Events", testEvents},
		{"JSON", testJSON},
		{"Times", testTimes},
		{"Tokens", testTokens},
		{"Idempotency", testIdempotency},
		{"Leases", testLeases},
		{"LeaseExpiry", testLeaseExpiry},
		{"ConcurrentAppends", testConcurrentAppends},
		{"LeaseRace", testLeaseRace},
		{"ClaimRace", testClaimRace},
		{"Canceled", testCanceled},
		{"Spend", testSpend},
		{"SpendConcurrent", testSpendConcurrent},
		{"Checkpoints", testCheckpoints},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.test(t, s)
		})
	}
}

// t0 has a sub-millisecond part and a zone other than UTC: a store must
// keep the instant to the millisecond and give it back in UTC.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123_456_789, time.FixedZone("UTC+5", 5*3600))

func newAgent(id, tenant string, created time.Time) store.Agent {
	return store.Agent{
		ID:          id,
		Tenant:      tenant,
		Request:     json.RawMessage(`{"driver":"claude","prompt":"hi","env":{"A":""}}`),
		Driver:      "claude",
		Model:       "sonnet",
		Image:       "sandbox-agent/claude:1",
		Engine:      "docker",
		SandboxID:   "c0ffee-" + id,
		SandboxName: "sa-" + id,
		SessionID:   "sess-" + id,
		Status:      "idle",
		Adopt:       json.RawMessage(`{"proxy_token":"secret-` + id + `","socket_dir":"/run/sa"}`),
		Owner:       "replica-1",
		Created:     created,
		Updated:     created.Add(time.Second),
	}
}

func newTurn(agentID string, n int, status string) store.Turn {
	tr := store.Turn{AgentID: agentID, N: n, Prompt: fmt.Sprintf("prompt %d", n), Status: status,
		Started: t0.Add(time.Duration(n) * time.Minute)}
	if status != "running" {
		tr.Result = json.RawMessage(fmt.Sprintf(`{"n":%d,"status":%q}`, n, status))
		tr.Ended = tr.Started.Add(30 * time.Second)
	}
	return tr
}

// events numbers events first..last of one turn.
func events(agentID string, turn int, first, last int64) []store.Event {
	var evs []store.Event
	for seq := first; seq <= last; seq++ {
		evs = append(evs, store.Event{AgentID: agentID, Seq: seq, Turn: turn, Kind: "event",
			Data: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq)), Time: t0.Add(time.Duration(seq) * time.Millisecond)})
	}
	return evs
}

func seqs(evs []store.Event) []int64 {
	out := []int64{}
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func ids[T any](xs []T, id func(T) string) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, id(x))
	}
	return out
}

func agentID(a store.Agent) string { return a.ID }
func tokenID(t store.Token) string { return t.ID }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// check compares records field by field (see diff).
func check(t *testing.T, what string, got, want any) {
	t.Helper()
	if d := diff(what, reflect.ValueOf(got), reflect.ValueOf(want)); len(d) > 0 {
		t.Errorf("%s", strings.Join(d, "\n"))
	}
}

// diff lists how got differs from want: times as instants to the
// millisecond and in UTC, JSON by meaning (not bytes: a backend may
// normalise whitespace), nil and empty slices alike.
func diff(path string, got, want reflect.Value) []string {
	mismatch := func() []string {
		return []string{fmt.Sprintf("%s: got %s, want %s", path, show(got), show(want))}
	}
	switch w := want.Interface().(type) {
	case time.Time:
		if !sameTime(got.Interface().(time.Time), w) {
			return mismatch()
		}
		return nil
	case json.RawMessage:
		if !sameJSON(got.Interface().(json.RawMessage), w) {
			return mismatch()
		}
		return nil
	}
	var out []string
	switch want.Kind() {
	case reflect.Struct:
		for i := range want.NumField() {
			out = append(out, diff(path+"."+want.Type().Field(i).Name, got.Field(i), want.Field(i))...)
		}
	case reflect.Slice:
		if got.Len() != want.Len() {
			return mismatch()
		}
		for i := range want.Len() {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i))...)
		}
	default:
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			return mismatch()
		}
	}
	return out
}

func show(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case json.RawMessage:
		return fmt.Sprintf("%s", x)
	case time.Time:
		return x.Format(time.RFC3339Nano + " MST")
	}
	return fmt.Sprintf("%+v", v.Interface())
}

func sameTime(got, want time.Time) bool {
	if want.IsZero() || got.IsZero() {
		return want.IsZero() && got.IsZero()
	}
	d := got.Sub(want)
	return got.Location() == time.UTC && d < time.Millisecond && d > -time.Millisecond
}

func sameJSON(got, want json.RawMessage) bool {
	if len(got) == 0 || len(want) == 0 {
		return len(got) == len(want)
	}
	decode := func(b []byte) (any, error) {
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.UseNumber() // 64-bit integers stay exact
		var v any
		err := d.Decode(&v)
		return v, err
	}
	g, err1 := decode(got)
	w, err2 := decode(want)
	return err1 == nil && err2 == nil && reflect.DeepEqual(g, w)
}

func testAgents(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := newAgent("a1", "t1", t0)
	must(t, s.CreateAgent(ctx, a))
	got, err := s.GetAgent(ctx, "a1")
	must(t, err)
	check(t, "GetAgent", got, a)

	wantErr(t, "CreateAgent of an existing id", s.CreateAgent(ctx, newAgent("a1", "t2", t0.Add(time.Hour))), store.ErrConflict)
	got, err = s.GetAgent(ctx, "a1")
	must(t, err)
	check(t, "GetAgent after the conflict", got, a)

	upd := a
	upd.Status, upd.Reason = "lost", "the container exited"
	upd.SessionID, upd.Owner, upd.Turns = "sess-2", "replica-2", 7
	upd.Adopt = json.RawMessage(`{"proxy_token":"other"}`)
	upd.Request = json.RawMessage(`{"driver":"codex"}`)
	upd.Driver, upd.Model, upd.Image, upd.Engine = "codex", "gpt", "img:2", "podman"
	upd.SandboxID, upd.SandboxName = "beef", "sa-beef"
	upd.Created, upd.Updated = t0.Add(-time.Hour), t0.Add(time.Hour)
	must(t, s.UpdateAgent(ctx, upd))
	got, err = s.GetAgent(ctx, "a1")
	must(t, err)
	check(t, "GetAgent after UpdateAgent", got, upd)

	wantErr(t, "UpdateAgent of an absent agent", s.UpdateAgent(ctx, newAgent("nope", "t1", t0)), store.ErrNotFound)
	_, err = s.GetAgent(ctx, "nope")
	wantErr(t, "GetAgent of an absent agent", err, store.ErrNotFound)
	wantErr(t, "DeleteAgent of an absent agent", s.DeleteAgent(ctx, "nope"), store.ErrNotFound)

	must(t, s.DeleteAgent(ctx, "a1"))
	_, err = s.GetAgent(ctx, "a1")
	wantErr(t, "GetAgent after DeleteAgent", err, store.ErrNotFound)
	wantErr(t, "DeleteAgent twice", s.DeleteAgent(ctx, "a1"), store.ErrNotFound)
	wantErr(t, "UpdateAgent after DeleteAgent", s.UpdateAgent(ctx, upd), store.ErrNotFound)
	// The id is free again.
	must(t, s.CreateAgent(ctx, a))
}

// An agent with only an ID keeps its empty strings, absent JSON and zero
// times as such (no NULL turned into "null", no zero time into 1970).
func testAgentZeroValues(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := store.Agent{ID: "bare"}
	must(t, s.CreateAgent(ctx, a))
	got, err := s.GetAgent(ctx, "bare")
	must(t, err)
	check(t, "GetAgent", got, a)
	list, err := s.ListAgents(ctx, "")
	must(t, err)
	check(t, "ListAgents", list, []store.Agent{a})
}

func testListAgents(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Created apart and inserted in another order than their age.
	b2 := newAgent("b2", "b", t0.Add(3*time.Minute))
	a2 := newAgent("a2", "a", t0.Add(2*time.Minute))
	a1 := newAgent("a1", "a", t0.Add(1*time.Minute))
	b1 := newAgent("b1", "b", t0)
	a3 := newAgent("a3", "a", t0.Add(4*time.Minute))
	for _, a := range []store.Agent{b2, a2, a1, b1, a3} {
		must(t, s.CreateAgent(ctx, a))
	}
	for _, tc := range []struct {
		tenant string
		want   []store.Agent
	}{
		{"a", []store.Agent{a1, a2, a3}},
		{"b", []store.Agent{b1, b2}},
		{"", []store.Agent{b1, a1, a2, b2, a3}},
		{"c", nil},
	} {
		got, err := s.ListAgents(ctx, tc.tenant)
		must(t, err)
		if g, w := ids(got, agentID), ids(tc.want, agentID); !reflect.DeepEqual(g, w) {
			t.Errorf("ListAgents(%q) = %v, want %v", tc.tenant, g, w)
			continue
		}
		check(t, fmt.Sprintf("ListAgents(%q)", tc.tenant), got, tc.want)
	}
}

func testDeleteAgentCascades(t *testing.T, s store.Store) {
	ctx := t.Context()
	const tenant = "t"
	keys := func(id string) []store.Idempotency {
		return []store.Idempotency{
			{Tenant: tenant, Key: "create-" + id, Route: "create_agent", Ref: id, Created: t0},
			{Tenant: tenant, Key: "turn-" + id, Route: "turn:" + id, Ref: "1", Created: t0},
			// Claimed, its request still running: no Ref yet.
			{Tenant: tenant, Key: "unset-" + id, Route: "turn:" + id, Created: t0},
		}
	}
	for _, id := range []string{"x", "y"} {
		must(t, s.CreateAgent(ctx, newAgent(id, tenant, t0)))
		must(t, s.PutTurn(ctx, newTurn(id, 1, "done")))
		must(t, s.AppendEvents(ctx, events(id, 1, 1, 3)))
		_, err := s.AcquireLease(ctx, id, "holder-"+id, time.Hour)
		must(t, err)
		for _, k := range keys(id) {
			ref := k.Ref
			k.Ref = ""
			_, ok, err := s.ClaimIdempotency(ctx, k)
			must(t, err)
			if !ok {
				t.Fatalf("ClaimIdempotency(%s) of a new key: not claimed", k.Key)
			}
			if ref != "" {
				must(t, s.SetIdempotencyRef(ctx, tenant, k.Key, ref))
			}
		}
	}

	must(t, s.DeleteAgent(ctx, "x"))

	_, err := s.GetTurn(ctx, "x", 1)
	wantErr(t, "GetTurn of a deleted agent", err, store.ErrNotFound)
	turns, err := s.ListTurns(ctx, "x")
	if err == nil && len(turns) != 0 {
		t.Errorf("ListTurns of a deleted agent: %d turns", len(turns))
	}
	evs, err := s.Events(ctx, "x", 0, 0, 100)
	if err == nil && len(evs) != 0 {
		t.Errorf("Events of a deleted agent: %v", seqs(evs))
	}
	for _, k := range keys("x") {
		if got, ok, err := s.ClaimIdempotency(ctx, k); err != nil || !ok {
			t.Errorf("key %s of the deleted agent survived: %+v, %v, %v", k.Key, got, ok, err)
		}
	}
	// The same id again starts bare: no events, no turns, no lease.
	must(t, s.CreateAgent(ctx, newAgent("x", tenant, t0)))
	if last, err := s.LastSeq(ctx, "x"); err != nil || last != 0 {
		t.Errorf("LastSeq of the re-created agent = %d, %v; want 0", last, err)
	}
	must(t, s.AppendEvents(ctx, events("x", 1, 1, 1)))
	if got, err := s.GetAgent(ctx, "x"); err != nil || got.Turns != 0 {
		t.Errorf("the re-created agent: Turns %d, %v", got.Turns, err)
	}
	if _, err := s.AcquireLease(ctx, "x", "other", time.Hour); err != nil {
		t.Errorf("the deleted agent's lease survived: %v", err)
	}

	// The other agent keeps everything.
	if _, err := s.GetTurn(ctx, "y", 1); err != nil {
		t.Errorf("GetTurn(y): %v", err)
	}
	evs, err = s.Events(ctx, "y", 0, 0, 100)
	must(t, err)
	if got := seqs(evs); !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Errorf("Events(y) = %v", got)
	}
	l, err := s.AcquireLease(ctx, "y", "other", time.Hour)
	wantErr(t, "AcquireLease(y) by another", err, store.ErrLeaseHeld)
	if l.Holder != "holder-y" {
		t.Errorf("y's lease: %+v", l)
	}
	for _, k := range keys("y") {
		got, ok, err := s.ClaimIdempotency(ctx, store.Idempotency{Tenant: tenant, Key: k.Key, Route: "other", Created: t0})
		if err != nil || ok {
			t.Errorf("key %s of the other agent: claimed again (%v, %v)", k.Key, ok, err)
		}
		check(t, "the other agent's key", got, k)
	}
}

func testTurns(t *testing.T, s store.Store) {
	ctx := t.Context()
	wantErr(t, "PutTurn of an absent agent", s.PutTurn(ctx, newTurn("nope", 1, "running")), store.ErrNotFound)
	must(t, s.CreateAgent(ctx, newAgent("a", "t", t0)))

	turns := func() int {
		a, err := s.GetAgent(ctx, "a")
		must(t, err)
		return a.Turns
	}
	running := newTurn("a", 1, "running")
	must(t, s.PutTurn(ctx, running))
	got, err := s.GetTurn(ctx, "a", 1)
	must(t, err)
	check(t, "GetTurn of the running turn", got, running)
	if n := turns(); n != 1 {
		t.Errorf("Agent.Turns = %d after turn 1, want 1", n)
	}

	done := newTurn("a", 1, "done")
	done.Prompt = "replaced"
	must(t, s.PutTurn(ctx, done))
	got, err = s.GetTurn(ctx, "a", 1)
	must(t, err)
	check(t, "GetTurn of the replaced turn", got, done)

	must(t, s.PutTurn(ctx, newTurn("a", 3, "failed")))
	if n := turns(); n != 3 {
		t.Errorf("Agent.Turns = %d after turn 3, want 3", n)
	}
	// A lower turn does not lower Turns.
	must(t, s.PutTurn(ctx, newTurn("a", 2, "interrupted")))
	if n := turns(); n != 3 {
		t.Errorf("Agent.Turns = %d after turn 2 came late, want 3", n)
	}

	list, err := s.ListTurns(ctx, "a")
	must(t, err)
	check(t, "ListTurns", list, []store.Turn{done, newTurn("a", 2, "interrupted"), newTurn("a", 3, "failed")})

	_, err = s.GetTurn(ctx, "a", 4)
	wantErr(t, "GetTurn of an absent turn", err, store.ErrNotFound)
	_, err = s.GetTurn(ctx, "nope", 1)
	wantErr(t, "GetTurn of an absent agent", err, store.ErrNotFound)
}

// Raising Turns is atomic: turns put at once leave the highest.
func testTurnsRaiseConcurrently(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateAgent(ctx, newAgent("a", "t", t0)))
	errs := parallel(8, func(i int) error { return s.PutTurn(ctx, newTurn("a", i+1, "done")) })
	for _, err := range errs {
		must(t, err)
	}
	a, err := s.GetAgent(ctx, "a")
	must(t, err)
	if a.Turns != 8 {
		t.Errorf("Agent.Turns = %d, want 8", a.Turns)
	}
}

func testAppendEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateAgent(ctx, newAgent("a", "t", t0)))
	must(t, s.CreateAgent(ctx, newAgent("fresh", "t", t0)))
	if last, err := s.LastSeq(ctx, "a"); err != nil || last != 0 {
		t.Fatalf("LastSeq of a new agent = %d, %v", last, err)
	}
	must(t, s.AppendEvents(ctx, nil)) // nothing to do
	first := events("a", 1, 1, 3)
	must(t, s.AppendEvents(ctx, first))

	batch := func(agentID string, ss ...int64) []store.Event {
		var evs []store.Event
		for _, seq := range ss {
			evs = append(evs, events(agentID, 2, seq, seq)...)
		}
		return evs
	}
	for _, tc := range []struct {
		name string
		evs  []store.Event
		want error
	}{
		{"gap before", batch("a", 5), store.ErrConflict},
		{"repeat of the last", batch("a", 3), store.ErrConflict},
		{"from the start again", batch("a", 1, 2, 3, 4), store.ErrConflict},
		{"zero", batch("a", 0), store.ErrConflict},
		{"gap inside", batch("a", 4, 6), store.ErrConflict},
		{"repeat inside", batch("a", 4, 5, 5), store.ErrConflict},
		{"backwards", batch("a", 4, 6, 5), store.ErrConflict},
		{"a new agent not from 1", batch("fresh", 2), store.ErrConflict},
		{"absent agent", batch("nope", 1), store.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, "AppendEvents", s.AppendEvents(ctx, tc.evs), tc.want)
			got, err := s.Events(ctx, "a", 0, 0, 100)
			must(t, err)
			check(t, "Events after the refused batch", got, first)
			if last, err := s.LastSeq(ctx, "a"); err != nil || last != 3 {
				t.Errorf("LastSeq = %d, %v; want 3", last, err)
			}
		})
	}

	must(t, s.AppendEvents(ctx, batch("a", 4, 5, 6)))
	must(t, s.AppendEvents(ctx, batch("fresh", 1)))
	if last, err := s.LastSeq(ctx, "a"); err != nil || last != 6 {
		t.Errorf("LastSeq = %d, %v; want 6", last, err)
	}
	got, err := s.Events(ctx, "a", 0, 0, 100)
	must(t, err)
	check(t, "Events", got, append(first, batch("a", 4, 5, 6)...))
}

func testEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateAgent(ctx, newAgent("a", "t", t0)))
	must(t, s.CreateAgent(ctx, newAgent("other", "t", t0)))
	// Turns 1..3 hold seqs 1-4, 5-9 and 10-12; each a turn_start, events,
	// a turn_end.
	var all []store.Event
	for turn, r := range [][2]int64{{1, 4}, {5, 9}, {10, 12}} {
		evs := events("a", turn+1, r[0], r[1])
		evs[0].Kind, evs[len(evs)-1].Kind = "turn_start", "turn_end"
		must(t, s.AppendEvents(ctx, evs))
		all = append(all, evs...)
	}
	must(t, s.AppendEvents(ctx, events("other", 1, 1, 20)))

	got, err := s.Events(ctx, "a", 0, 0, 100)
	must(t, err)
	check(t, "Events(all)", got, all)

	for _, tc := range []struct {
		turn  int
		after int64
		limit int
		want  []int64
	}{
		{0, 5, 100, []int64{6, 7, 8, 9, 10, 11, 12}},
		{0, 0, 3, []int64{1, 2, 3}},
		{0, 10, 5, []int64{11, 12}},
		{0, 12, 10, nil},
		{0, 100, 10, nil},
		{2, 0, 100, []int64{5, 6, 7, 8, 9}},
		{2, 6, 2, []int64{7, 8}},
		{2, 9, 10, nil},
		{3, 0, 1, []int64{10}},
		{1, 2, 100, []int64{3, 4}},
		{4, 0, 10, nil},
	} {
		got, err := s.Events(ctx, "a", tc.turn, tc.after, tc.limit)
		must(t, err)
		if g := seqs(got); !reflect.DeepEqual(g, append([]int64{}, tc.want...)) {
			t.Errorf("Events(turn %d, after %d, limit %d) = %v, want %v", tc.turn, tc.after, tc.limit, g, tc.want)
		}
	}
	got, err = s.Events(ctx, "nope", 0, 0, 10)
	if err == nil && len(got) != 0 {
		t.Errorf("Events of an absent agent: %v", seqs(got))
	}
}

func testJSON(t *testing.T, s store.Store) {
	ctx := t.Context()
	big := `{"text":"` + strings.Repeat("0123456789abcdef", 8<<10) + `"}`
	docs := []struct{ name, doc string }{
		{"object", `{"b":1,"a":[true,false,null],"nested":{"x":"y","n":{}}}`},
		{"unicode", `"unicode ✓ — 日本語 \u00e9 \ud83d\ude00"`},
		{"escapes", `{"nul":"a\u0000b","esc":"\"\\/\b\f\n\r\t","html":"<&>\u2028"}`},
		{"numbers", `[1,-2.5,12345678901234567890,0.1,-0]`},
		{"literal null", `null`},
		{"whitespace", " { \"k\" :\n [ 1 , 2 ] }\t"},
		{"128 KiB", big},
		{"absent", ``},
	}
	for i, d := range docs {
		t.Run(d.name, func(t *testing.T) {
			doc := json.RawMessage(d.doc)
			if d.doc == "" {
				doc = nil
			}
			id := fmt.Sprintf("j%d", i)
			a := newAgent(id, "t", t0)
			a.Request, a.Adopt = doc, doc
			must(t, s.CreateAgent(ctx, a))
			got, err := s.GetAgent(ctx, id)
			must(t, err)
			check(t, "Agent", got, a)

			tr := newTurn(id, 1, "done")
			tr.Result = doc
			must(t, s.PutTurn(ctx, tr))
			gotTurn, err := s.GetTurn(ctx, id, 1)
			must(t, err)
			check(t, "Turn", gotTurn, tr)

			ev := events(id, 1, 1, 1)
			ev[0].Data = doc
			must(t, s.AppendEvents(ctx, ev))
			gotEvs, err := s.Events(ctx, id, 0, 0, 10)
			must(t, err)
			check(t, "Events", gotEvs, ev)
		})
	}
}

func testTimes(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i, tm := range []time.Time{
		t0,
		time.Date(1969, 12, 31, 23, 59, 59, 999_000_000, time.UTC), // before the epoch
		time.Date(1900, 1, 1, 0, 0, 0, 1_000_000, time.FixedZone("", -3*3600-1800)),
		time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC), // past int64 nanoseconds
		time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 1_000_000, time.UTC), // a millisecond after the zero time
		time.Unix(1_700_000_000, 999_999_999).In(time.Local),
	} {
		t.Run(tm.Format(time.RFC3339Nano), func(t *testing.T) {
			id := fmt.Sprintf("tm%d", i)
			a := newAgent(id, "t", tm)
			a.Updated = tm
			must(t, s.CreateAgent(ctx, a))
			got, err := s.GetAgent(ctx, id)
			must(t, err)
			check(t, "Agent", got, a)

			tok := store.Token{ID: id, Hash: "hash-" + id, Tenant: "t", Expires: tm, Created: tm}
			must(t, s.CreateToken(ctx, tok))
			must(t, s.RevokeToken(ctx, id, tm))
			tok.Revoked = tm
			gotTok, err := s.TokenByHash(ctx, tok.Hash)
			must(t, err)
			check(t, "Token", gotTok, tok)
		})
	}

	// Zero times stay zero; a running turn's Ended is zero.
	must(t, s.CreateAgent(ctx, newAgent("z", "t", t0)))
	running := newTurn("z", 1, "running")
	must(t, s.PutTurn(ctx, running))
	got, err := s.GetTurn(ctx, "z", 1)
	must(t, err)
	check(t, "running Turn", got, running)
	tok := store.Token{ID: "never", Hash: "hash-never", Tenant: "t", Created: t0}
	must(t, s.CreateToken(ctx, tok))
	gotTok, err := s.TokenByHash(ctx, tok.Hash)
	must(t, err)
	check(t, "Token without expiry", gotTok, tok)
}

func testTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	tk1 := store.Token{ID: "tk1", Hash: strings.Repeat("a1", 32), Tenant: "a", Scopes: []string{"agents:read", "agents:write"},
		Expires: t0.Add(24 * time.Hour), Created: t0}
	tk2 := store.Token{ID: "tk2", Hash: strings.Repeat("b2", 32), Tenant: "b", Created: t0.Add(-time.Hour)}
	tk3 := store.Token{ID: "tk3", Hash: strings.Repeat("c3", 32), Tenant: "a", Scopes: []string{"admin"}, Created: t0.Add(time.Minute)}
	// Expired long ago: still found, the caller decides.
	old := store.Token{ID: "old", Hash: strings.Repeat("d4", 32), Tenant: "c", Expires: t0.Add(-48 * time.Hour), Created: t0.Add(-72 * time.Hour)}
	for _, tk := range []store.Token{tk1, tk2, tk3, old} {
		must(t, s.CreateToken(ctx, tk))
	}
	for _, tk := range []store.Token{tk1, tk2, tk3, old} {
		got, err := s.TokenByHash(ctx, tk.Hash)
		must(t, err)
		check(t, "TokenByHash("+tk.ID+")", got, tk)
	}
	_, err := s.TokenByHash(ctx, strings.Repeat("ff", 32))
	wantErr(t, "TokenByHash of an unknown hash", err, store.ErrNotFound)

	for _, tc := range []struct {
		name string
		tok  store.Token
	}{
		{"same id", store.Token{ID: "tk1", Hash: strings.Repeat("e5", 32), Tenant: "z", Created: t0}},
		{"same hash", store.Token{ID: "tk9", Hash: tk1.Hash, Tenant: "z", Created: t0}},
		{"both", tk2},
	} {
		wantErr(t, "CreateToken with the "+tc.name, s.CreateToken(ctx, tc.tok), store.ErrConflict)
	}
	if _, err := s.TokenByHash(ctx, strings.Repeat("e5", 32)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a conflicting token was written: %v", err)
	}

	for _, tc := range []struct {
		tenant string
		want   []store.Token
	}{
		{"a", []store.Token{tk1, tk3}},
		{"", []store.Token{old, tk2, tk1, tk3}},
		{"z", nil},
	} {
		got, err := s.ListTokens(ctx, tc.tenant)
		must(t, err)
		if g, w := ids(got, tokenID), ids(tc.want, tokenID); !reflect.DeepEqual(g, w) {
			t.Errorf("ListTokens(%q) = %v, want %v", tc.tenant, g, w)
			continue
		}
		check(t, fmt.Sprintf("ListTokens(%q)", tc.tenant), got, tc.want)
	}

	first := t0.Add(2 * time.Hour)
	must(t, s.RevokeToken(ctx, "tk1", first))
	must(t, s.RevokeToken(ctx, "tk1", first.Add(time.Hour)))
	got, err := s.TokenByHash(ctx, tk1.Hash)
	must(t, err)
	tk1.Revoked = first
	check(t, "the revoked token", got, tk1)
	wantErr(t, "RevokeToken of an absent token", s.RevokeToken(ctx, "nope", first), store.ErrNotFound)
	if got, err := s.TokenByHash(ctx, tk3.Hash); err != nil || !got.Revoked.IsZero() {
		t.Errorf("revoking tk1 touched tk3: %+v, %v", got, err)
	}
}

func testIdempotency(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := store.Idempotency{Tenant: "a", Key: "k1", Route: "create_agent", Created: t0}
	got, ok, err := s.ClaimIdempotency(ctx, k)
	must(t, err)
	if !ok {
		t.Fatal("ClaimIdempotency of a new key: not claimed")
	}
	check(t, "the claim", got, k)

	// The same key again, even on another route: the first record.
	again := store.Idempotency{Tenant: "a", Key: "k1", Route: "turn:x", Created: t0.Add(time.Minute)}
	got, ok, err = s.ClaimIdempotency(ctx, again)
	must(t, err)
	if ok {
		t.Error("ClaimIdempotency of a held key: claimed")
	}
	check(t, "the second claim", got, k)

	must(t, s.SetIdempotencyRef(ctx, "a", "k1", "agent-1"))
	got, ok, err = s.ClaimIdempotency(ctx, again)
	must(t, err)
	k.Ref = "agent-1"
	if ok {
		t.Error("ClaimIdempotency after SetIdempotencyRef: claimed")
	}
	check(t, "the claim after SetIdempotencyRef", got, k)

	// Keys are per tenant.
	other := store.Idempotency{Tenant: "b", Key: "k1", Route: "create_agent", Created: t0}
	if got, ok, err := s.ClaimIdempotency(ctx, other); err != nil || !ok {
		t.Errorf("the same key of another tenant: %+v, %v, %v", got, ok, err)
	}

	must(t, s.ReleaseIdempotency(ctx, "a", "k1"))
	got, ok, err = s.ClaimIdempotency(ctx, again)
	must(t, err)
	if !ok {
		t.Error("ClaimIdempotency after ReleaseIdempotency: not claimed")
	}
	check(t, "the claim after the release", got, again)
	// The release forgot a's key only.
	got, ok, err = s.ClaimIdempotency(ctx, store.Idempotency{Tenant: "b", Key: "k1", Route: "x"})
	must(t, err)
	if ok {
		t.Error("releasing a's key released b's")
	}
	check(t, "b's key", got, other)
}

func testLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateAgent(ctx, newAgent("a", "t", t0)))
	must(t, s.CreateAgent(ctx, newAgent("b", "t", t0)))
	const ttl = time.Hour // nothing expires in this test

	l1, err := s.AcquireLease(ctx, "a", "h1", ttl)
	must(t, err)
	if l1.AgentID != "a" || l1.Holder != "h1" || l1.Expires.IsZero() {
		t.Fatalf("AcquireLease of a free lease = %+v", l1)
	}
	held := func(what, holder string, want store.Lease) {
		t.Helper()
		got, err := s.AcquireLease(ctx, "a", holder, ttl)
		wantErr(t, what, err, store.ErrLeaseHeld)
		check(t, what+": the current lease", got, want)
	}
	held("AcquireLease by another", "h2", l1)

	time.Sleep(20 * time.Millisecond)
	l2, err := s.AcquireLease(ctx, "a", "h1", ttl)
	must(t, err)
	if l2.Holder != "h1" || !l2.Expires.After(l1.Expires) {
		t.Errorf("the renewal %+v does not extend %+v", l2, l1)
	}
	held("AcquireLease by another after the renewal", "h2", l2)

	// Leases are per agent.
	if _, err := s.AcquireLease(ctx, "b", "h2", ttl); err != nil {
		t.Errorf("AcquireLease of another agent: %v", err)
	}

	must(t, s.ReleaseLease(ctx, "a", "h2")) // not h2's: no-op
	held("AcquireLease after another's release", "h2", l2)
	must(t, s.ReleaseLease(ctx, "nope", "h1"))

	must(t, s.ReleaseLease(ctx, "a", "h1"))
	l3, err := s.AcquireLease(ctx, "a", "h2", ttl)
	must(t, err)
	if l3.Holder != "h2" {
		t.Errorf("AcquireLease after the release = %+v", l3)
	}
	held("the first holder after losing it", "h1", l3)
}

// A lease expires on its own: after its TTL another holder takes it, not
// before; a renewal moves the expiry.
func testLeaseExpiry(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateAgent(ctx, newAgent("a", "t", t0)))
	const ttl = 300 * time.Millisecond
	const slack = 50 * time.Millisecond // clock and rounding; generous
	start := time.Now()
	_, err := s.AcquireLease(ctx, "a", "h1", ttl)
	must(t, err)
	_, err = s.AcquireLease(ctx, "a", "h2", ttl)
	wantErr(t, "AcquireLease by another before the expiry", err, store.ErrLeaseHeld)

	time.Sleep(ttl * 2 / 3)
	renewed := time.Now()
	_, err = s.AcquireLease(ctx, "a", "h1", ttl)
	must(t, err)
	_, err = s.AcquireLease(ctx, "a", "h2", ttl)
	wantErr(t, "AcquireLease by another after the renewal", err, store.ErrLeaseHeld)

	for {
		l, err := s.AcquireLease(ctx, "a", "h2", ttl)
		if err == nil {
			if l.Holder != "h2" {
				t.Errorf("AcquireLease after the expiry = %+v", l)
			}
			if early := renewed.Add(ttl - slack); time.Now().Before(early) {
				t.Errorf("the renewed lease expired %v after its renewal, want %v", time.Since(renewed), ttl)
			}
			break
		}
		wantErr(t, "AcquireLease by another", err, store.ErrLeaseHeld)
		if time.Since(start) > 10*ttl {
			t.Fatalf("the lease did not expire in %v", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err = s.AcquireLease(ctx, "a", "h1", ttl)
	wantErr(t, "AcquireLease by the first holder after it expired", err, store.ErrLeaseHeld)
}

// Spend adds up per scope and period (the zero period apart), starts at
// zero, treats negative counts as zero, and stops each count at the
// largest int64 instead of wrapping or failing.
func testSpend(t *testing.T, s store.Store) {
	ctx := context.Background()
	day := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	got, err := s.GetSpend(ctx, "tenant a", day)
	must(t, err)
	check(t, "nothing added", got, store.Spend{Scope: "tenant a", Period: day})
	add := store.Spend{Scope: "tenant a", Period: day, InputTokens: 10, OutputTokens: 5, CacheReadTokens: 3, CacheWriteTokens: 2, UnpricedTokens: 1, Requests: 1, CostNanoUSD: 700}
	got, err = s.AddSpend(ctx, add)
	must(t, err)
	check(t, "first add", got, add)
	got, err = s.AddSpend(ctx, store.Spend{Scope: "tenant a", Period: day, InputTokens: 1, OutputTokens: -50, Requests: 1, CostNanoUSD: 300})
	must(t, err)
	want := add
	want.InputTokens, want.Requests, want.CostNanoUSD = 11, 2, 1000
	check(t, "second add (a negative count as zero)", got, want)
	got, err = s.GetSpend(ctx, "tenant a", day)
	must(t, err)
	check(t, "read back", got, want)
	for _, other := range []struct {
		scope  string
		period time.Time
	}{{"tenant b", day}, {"tenant a", day.AddDate(0, 0, 1)}, {"tenant a", time.Time{}}} {
		got, err := s.GetSpend(ctx, other.scope, other.period)
		must(t, err)
		check(t, "another scope or period", got, store.Spend{Scope: other.scope, Period: other.period})
	}
	big := store.Spend{Scope: "tenant c", InputTokens: math.MaxInt64 - 1, CostNanoUSD: math.MaxInt64}
	_, err = s.AddSpend(ctx, big)
	must(t, err)
	got, err = s.AddSpend(ctx, store.Spend{Scope: "tenant c", InputTokens: 5, CostNanoUSD: 5, Requests: 1})
	must(t, err)
	check(t, "saturated", got, store.Spend{Scope: "tenant c", InputTokens: math.MaxInt64, CostNanoUSD: math.MaxInt64, Requests: 1})
}

// Checkpoints: put, read back whole, never replaced by id, listed per tenant
// oldest first, deleted; they outlive the agent they were made of.
func testCheckpoints(t *testing.T, s store.Store) {
	ctx := t.Context()
	ck := func(id, tenant string, created time.Time, size int64) store.Checkpoint {
		return store.Checkpoint{ID: id, Tenant: tenant, AgentID: "ag-" + id, Created: created, Size: size,
			Data: json.RawMessage(fmt.Sprintf(`{"id":%q,"driver":"pi","size":%d,"archive":"/var/ck/%s"}`, id, size, id))}
	}
	_, err := s.Checkpoint(ctx, "ck-none")
	wantErr(t, "Checkpoint of an absent id", err, store.ErrNotFound)
	wantErr(t, "DeleteCheckpoint of an absent id", s.DeleteCheckpoint(ctx, "ck-none"), store.ErrNotFound)
	got, err := s.Checkpoints(ctx, "")
	must(t, err)
	check(t, "Checkpoints of an empty store", got, []store.Checkpoint(nil))

	// Made apart and put in another order than their age.
	b2 := ck("ck-b2", "b", t0.Add(3*time.Minute), 30)
	a2 := ck("ck-a2", "a", t0.Add(2*time.Minute), 20)
	a1 := ck("ck-a1", "a", t0.Add(time.Minute), 1<<40) // past 32 bits
	b1 := ck("ck-b1", "b", t0, 10)
	for _, c := range []store.Checkpoint{b2, a2, a1, b1} {
		must(t, s.PutCheckpoint(ctx, c))
	}
	one, err := s.Checkpoint(ctx, "ck-a1")
	must(t, err)
	check(t, "Checkpoint", one, a1)
	for _, tc := range []struct {
		tenant string
		want   []store.Checkpoint
	}{
		{"a", []store.Checkpoint{a1, a2}},
		{"b", []store.Checkpoint{b1, b2}},
		{"", []store.Checkpoint{b1, a1, a2, b2}},
		{"c", nil},
	} {
		got, err := s.Checkpoints(ctx, tc.tenant)
		must(t, err)
		check(t, fmt.Sprintf("Checkpoints(%q)", tc.tenant), got, tc.want)
	}

	// A second put of an id conflicts and leaves the first.
	clash := a2
	clash.Tenant, clash.Size, clash.Data = "b", 21, json.RawMessage(`{"id":"ck-a2","size":21}`)
	wantErr(t, "PutCheckpoint of a stored id", s.PutCheckpoint(ctx, clash), store.ErrConflict)
	one, err = s.Checkpoint(ctx, "ck-a2")
	must(t, err)
	check(t, "Checkpoint after a second put", one, a2)

	// Not tied to an agent: deleting one (or none existing) leaves them.
	must(t, s.CreateAgent(ctx, newAgent("ag-ck-b1", "b", t0)))
	must(t, s.DeleteAgent(ctx, "ag-ck-b1"))
	_, err = s.Checkpoint(ctx, "ck-b1")
	must(t, err)

	must(t, s.DeleteCheckpoint(ctx, "ck-a1"))
	_, err = s.Checkpoint(ctx, "ck-a1")
	wantErr(t, "Checkpoint after DeleteCheckpoint", err, store.ErrNotFound)
	wantErr(t, "DeleteCheckpoint twice", s.DeleteCheckpoint(ctx, "ck-a1"), store.ErrNotFound)
	got, err = s.Checkpoints(ctx, "a")
	must(t, err)
	check(t, "Checkpoints after DeleteCheckpoint", got, []store.Checkpoint{a2})
}

// Concurrent adds (replicas charging one tenant) lose none.
func testSpendConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 40
	errs := parallel(n, func(i int) error {
		_, err := s.AddSpend(ctx, store.Spend{Scope: "tenant", InputTokens: int64(i), OutputTokens: 1, Requests: 1, CostNanoUSD: 10})
		return err
	})
	for _, err := range errs {
		must(t, err)
	}
	got, err := s.GetSpend(ctx, "tenant", time.Time{})
	must(t, err)
	check(t, "total", got, store.Spend{Scope: "tenant", InputTokens: n * (n - 1) / 2, OutputTokens: n, Requests: n, CostNanoUSD: 10 * n})
}

// parallel runs f(0..n-1) at once (released together) and returns their
// errors.
func parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	done := make(chan struct{})
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			errs[i] = f(i)
		}()
	}
	close(start)
	for range n {
		<-done
	}
	return errs
}

// Writers that retry on ErrConflict end with one gapless sequence holding
// every event of every writer, each writer's in its order.
func testConcurrentAppends(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateAgent(ctx, newAgent("a", "t", t0)))
	const writers, each = 8, 24
	errs := parallel(writers, func(w int) error {
		for i := 0; i < each; {
			size := 1 + (w+i)%3 // batches of 1 to 3
			if i+size > each {
				size = each - i
			}
			last, err := s.LastSeq(ctx, "a")
			if err != nil {
				return err
			}
			var evs []store.Event
			for j := range size {
				evs = append(evs, store.Event{AgentID: "a", Seq: last + 1 + int64(j), Turn: 1, Kind: "event",
					Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i+j)), Time: t0})
			}
			switch err := s.AppendEvents(ctx, evs); {
			case errors.Is(err, store.ErrConflict):
				continue // another writer took the seq: read it again
			case err != nil:
				return err
			}
			i += size
		}
		return nil
	})
	for _, err := range errs {
		must(t, err)
	}
	evs, err := s.Events(ctx, "a", 0, 0, writers*each+1)
	must(t, err)
	next := make([]int, writers)
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: %v", i, e.Seq, seqs(evs))
		}
		var d struct{ W, I int }
		must(t, json.Unmarshal(e.Data, &d))
		if d.I != next[d.W] {
			t.Errorf("seq %d: writer %d's event %d, want its %d", e.Seq, d.W, d.I, next[d.W])
		}
		next[d.W] = d.I + 1
	}
	if len(evs) != writers*each {
		t.Errorf("%d events, want %d", len(evs), writers*each)
	}
	if last, err := s.LastSeq(ctx, "a"); err != nil || last != writers*each {
		t.Errorf("LastSeq = %d, %v; want %d", last, err, writers*each)
	}
}

// Holders racing for a free lease: exactly one gets it, the others see
// its lease.
func testLeaseRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round := range 5 {
		id := fmt.Sprintf("a%d", round)
		must(t, s.CreateAgent(ctx, newAgent(id, "t", t0)))
		leases := make([]store.Lease, 8)
		errs := parallel(8, func(i int) error {
			var err error
			leases[i], err = s.AcquireLease(ctx, id, fmt.Sprintf("h%d", i), time.Minute)
			return err
		})
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("round %d: h%d and h%d both got the lease", round, winner, i)
			case err == nil:
				winner = i
			default:
				wantErr(t, "AcquireLease", err, store.ErrLeaseHeld)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody got the lease: %v", round, errs)
		}
		for i, l := range leases {
			if l.Holder != leases[winner].Holder {
				t.Errorf("round %d: h%d saw the lease of %q, want %q", round, i, l.Holder, leases[winner].Holder)
			}
		}
	}
}

func testClaimRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round := range 5 {
		key := fmt.Sprintf("k%d", round)
		got := make([]store.Idempotency, 8)
		claimed := make([]bool, 8)
		errs := parallel(8, func(i int) error {
			var err error
			got[i], claimed[i], err = s.ClaimIdempotency(ctx, store.Idempotency{Tenant: "t", Key: key, Route: fmt.Sprintf("r%d", i), Created: t0})
			return err
		})
		winner := -1
		for i, err := range errs {
			must(t, err)
			if claimed[i] {
				if winner >= 0 {
					t.Errorf("round %d: claims %d and %d both won", round, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no claim won", round)
		}
		for i := range got {
			check(t, fmt.Sprintf("round %d claim %d", round, i), got[i], got[winner])
		}
	}
}

// Every method gives up on a cancelled context, with an error that says
// so, and writes nothing.
func testCanceled(t *testing.T, s store.Store) {
	live := t.Context()
	must(t, s.CreateAgent(live, newAgent("a", "t", t0)))
	must(t, s.PutTurn(live, newTurn("a", 1, "done")))
	must(t, s.CreateToken(live, store.Token{ID: "tk", Hash: "h", Tenant: "t", Created: t0}))
	ctx, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"CreateAgent", func() error { return s.CreateAgent(ctx, newAgent("new", "t", t0)) }},
		{"UpdateAgent", func() error { return s.UpdateAgent(ctx, newAgent("a", "t", t0)) }},
		{"GetAgent", func() error { _, err := s.GetAgent(ctx, "a"); return err }},
		{"ListAgents", func() error { _, err := s.ListAgents(ctx, ""); return err }},
		{"DeleteAgent", func() error { return s.DeleteAgent(ctx, "a") }},
		{"PutTurn", func() error { return s.PutTurn(ctx, newTurn("a", 2, "running")) }},
		{"GetTurn", func() error { _, err := s.GetTurn(ctx, "a", 1); return err }},
		{"ListTurns", func() error { _, err := s.ListTurns(ctx, "a"); return err }},
		{"AppendEvents", func() error { return s.AppendEvents(ctx, events("a", 1, 1, 2)) }},
		{"Events", func() error { _, err := s.Events(ctx, "a", 0, 0, 10); return err }},
		{"LastSeq", func() error { _, err := s.LastSeq(ctx, "a"); return err }},
		{"CreateToken", func() error {
			return s.CreateToken(ctx, store.Token{ID: "tk2", Hash: "h2", Tenant: "t", Created: t0})
		}},
		{"TokenByHash", func() error { _, err := s.TokenByHash(ctx, "h"); return err }},
		{"ListTokens", func() error { _, err := s.ListTokens(ctx, ""); return err }},
		{"RevokeToken", func() error { return s.RevokeToken(ctx, "tk", t0) }},
		{"ClaimIdempotency", func() error {
			_, _, err := s.ClaimIdempotency(ctx, store.Idempotency{Tenant: "t", Key: "k", Route: "create_agent"})
			return err
		}},
		{"SetIdempotencyRef", func() error { return s.SetIdempotencyRef(ctx, "t", "k", "a") }},
		{"ReleaseIdempotency", func() error { return s.ReleaseIdempotency(ctx, "t", "k") }},
		{"AcquireLease", func() error { _, err := s.AcquireLease(ctx, "a", "h", time.Minute); return err }},
		{"ReleaseLease", func() error { return s.ReleaseLease(ctx, "a", "h") }},
	} {
		wantErr(t, tc.name, tc.call(), context.Canceled)
	}

	// Nothing of the above happened.
	if _, err := s.GetAgent(live, "new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateAgent with a cancelled context created: %v", err)
	}
	if a, err := s.GetAgent(live, "a"); err != nil || a.Turns != 1 {
		t.Errorf("the agent after cancelled calls: %+v, %v", a, err)
	}
	if last, err := s.LastSeq(live, "a"); err != nil || last != 0 {
		t.Errorf("AppendEvents with a cancelled context appended: %d, %v", last, err)
	}
	if tk, err := s.TokenByHash(live, "h"); err != nil || !tk.Revoked.IsZero() {
		t.Errorf("RevokeToken with a cancelled context revoked: %+v, %v", tk, err)
	}
	if _, ok, err := s.ClaimIdempotency(live, store.Idempotency{Tenant: "t", Key: "k", Route: "create_agent"}); err != nil || !ok {
		t.Errorf("ClaimIdempotency with a cancelled context claimed: %v, %v", ok, err)
	}
	if _, err := s.AcquireLease(live, "a", "other", time.Minute); err != nil {
		t.Errorf("AcquireLease with a cancelled context leased: %v", err)
	}
}

// TurnWrites is the benchmark of what one turn costs the server in
// writes: PutTurn(running), 22 events (turn_start, 20 events, turn_end) in
// 3 batches, PutTurn(done), UpdateAgent. Beside the mean it reports the
// p50 and p99 of a turn.
func TurnWrites(b *testing.B, s store.Store) {
	ctx := b.Context()
	a := newAgent("bench", "t", time.Now())
	if err := s.CreateAgent(ctx, a); err != nil {
		b.Fatal(err)
	}
	data := json.RawMessage(`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"` +
		strings.Repeat("lorem ipsum ", 16) + `"}]},"session_id":"0b7e8c3e-5d6f-4a1b-9c2d-3e4f5a6b7c8d"}`)
	var seq int64
	var durs []time.Duration
	for b.Loop() {
		began := time.Now()
		a.Turns++
		tr := store.Turn{AgentID: a.ID, N: a.Turns, Prompt: "write a haiku about sqlite", Status: "running", Started: began}
		if err := s.PutTurn(ctx, tr); err != nil {
			b.Fatal(err)
		}
		evs := make([]store.Event, 22)
		for i := range evs {
			seq++
			evs[i] = store.Event{AgentID: a.ID, Seq: seq, Turn: tr.N, Kind: "event", Data: data, Time: time.Now()}
		}
		evs[0].Kind, evs[21].Kind = "turn_start", "turn_end"
		for _, batch := range [][]store.Event{evs[:7], evs[7:14], evs[14:]} {
			if err := s.AppendEvents(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		tr.Status, tr.Ended, tr.Result = "done", time.Now(), json.RawMessage(`{"status":"done","cost_usd":0.0123,"turns":3}`)
		if err := s.PutTurn(ctx, tr); err != nil {
			b.Fatal(err)
		}
		a.Status, a.Updated = "idle", time.Now()
		if err := s.UpdateAgent(ctx, a); err != nil {
			b.Fatal(err)
		}
		durs = append(durs, time.Since(began))
	}
	if last, err := s.LastSeq(ctx, a.ID); err != nil || last != seq || seq != int64(22*a.Turns) {
		b.Fatalf("LastSeq = %d, %v; wrote %d in %d turns", last, err, seq, a.Turns)
	}
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns/turn")
	b.ReportMetric(float64(durs[len(durs)*99/100].Nanoseconds()), "p99-ns/turn")
}
