package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// The journal keeps per turn what the library's record keeps (its first
// 5,000 events, about 4 MiB): later events still reach live streams, but
// without an id, and a replay skips them.
const (
	journalTurnEvents = 5000
	journalTurnBytes  = 4 << 20
)

// message is one message of an agent's streams: a turn's start, one of
// its events, its end. seq is its SSE id (0: not kept in the store).
type message struct {
	seq   int64
	turn  int
	event string // "turn_start", "event", "turn_end"
	data  json.RawMessage
}

// journal writes an agent's messages to the store in order, in batches,
// and hands each batch to the live subscribers once it is written: a
// client never sees an id the store lacks.
type journal struct {
	st      store.Store
	agentID string
	log     *slog.Logger

	mu        sync.Mutex
	seq       int64 // the last id given
	flushed   int64 // the last id written (or given up on)
	pending   []message
	turnCount int // the running turn's kept events and their size
	turnBytes int
	subs      map[chan []message]struct{}
	wake      chan struct{}
	idle      *sync.Cond // signalled when pending empties
	writing   bool
	closed    bool
}

func newJournal(st store.Store, agentID string, lastSeq int64, log *slog.Logger) *journal {
	j := &journal{
		st: st, agentID: agentID, log: log, seq: lastSeq, flushed: lastSeq,
		subs: map[chan []message]struct{}{}, wake: make(chan struct{}, 1),
	}
	j.idle = sync.NewCond(&j.mu)
	go j.run()
	return j
}

// add queues a message; it never blocks (it runs in the library's
// observer).
func (j *journal) add(turn int, event string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		j.log.Warn("journal: encode", "agent", j.agentID, "err", err)
		return
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return
	}
	m := message{turn: turn, event: event, data: data}
	keep := true
	switch event {
	case "turn_start":
		j.turnCount, j.turnBytes = 0, 0
	case "event":
		keep = j.turnCount < journalTurnEvents && j.turnBytes+len(data) <= journalTurnBytes
		if keep {
			j.turnCount++
			j.turnBytes += len(data)
		}
	}
	if keep {
		j.seq++
		m.seq = j.seq
	}
	j.pending = append(j.pending, m)
	select { // under mu: close closes wake under it too
	case j.wake <- struct{}{}:
	default:
	}
	j.mu.Unlock()
}

// run writes the pending messages, batch by batch.
func (j *journal) run() {
	for range j.wake {
		for {
			j.mu.Lock()
			batch := j.pending
			j.pending = nil
			if len(batch) == 0 {
				j.writing = false
				j.idle.Broadcast()
				closed := j.closed
				j.mu.Unlock()
				if closed {
					return
				}
				break
			}
			j.writing = true
			j.mu.Unlock()
			j.write(batch)
		}
	}
}

func (j *journal) write(batch []message) {
	now := time.Now().UTC()
	evs := keptEvents(j.agentID, batch, now)
	if len(evs) > 0 && !j.append(evs) {
		// The store kept none of them (it is down, or another server
		// wrote this agent's messages meanwhile): they go live without
		// ids, and numbering goes on after what the store has, so it
		// stays gapless.
		j.renumber(batch)
	}
	for _, m := range batch {
		if m.event == "turn_start" || m.event == "turn_end" {
			j.putTurn(m, now)
		}
	}
	j.mu.Lock()
	for _, m := range batch {
		if m.seq > j.flushed {
			j.flushed = m.seq
		}
	}
	for ch := range j.subs {
		select {
		case ch <- batch:
		default:
			// A subscriber that fell this far behind is dropped: its
			// stream ends and its client resumes with Last-Event-ID.
			delete(j.subs, ch)
			close(ch)
		}
	}
	j.mu.Unlock()
}

// keptEvents are the messages of batch the store keeps (those with an id).
func keptEvents(agentID string, batch []message, now time.Time) []store.Event {
	evs := make([]store.Event, 0, len(batch))
	for _, m := range batch {
		if m.seq != 0 {
			evs = append(evs, store.Event{AgentID: agentID, Seq: m.seq, Turn: m.turn, Kind: m.event, Data: m.data, Time: now})
		}
	}
	return evs
}

// appendTries and appendBackoff: a store that fails for a moment (a
// restart, a lock) is tried again for about 3 s before the batch is given
// up.
const (
	appendTries   = 6
	appendBackoff = 100 * time.Millisecond
)

// append stores evs, trying again while the store fails; it reports
// whether they were stored.
func (j *journal) append(evs []store.Event) bool {
	wait := appendBackoff
	for try := 1; ; try++ {
		// Bounded: a store that hangs must not hold the agent's streams.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := j.st.AppendEvents(ctx, evs)
		cancel()
		switch {
		case err == nil:
			return true
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound), try == appendTries:
			j.log.Warn("journal: store events", "agent", j.agentID, "events", len(evs), "err", err)
			return false
		}
		time.Sleep(wait)
		wait *= 2
	}
}

// renumber takes the ids of batch (not stored) back, and numbers the
// messages waiting after it from the store's last id.
func (j *journal) renumber(batch []message) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	last, err := j.st.LastSeq(ctx, j.agentID)
	cancel()
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range batch {
		batch[i].seq = 0
	}
	if err != nil {
		last = j.flushed // the store is unreachable: the next batch tries the same ids again
	}
	j.seq, j.flushed = last, last
	for i := range j.pending {
		if j.pending[i].seq != 0 {
			j.seq++
			j.pending[i].seq = j.seq
		}
	}
}

// putTurn writes the turn row a turn_start or turn_end message implies.
func (j *journal) putTurn(m message, now time.Time) {
	t := store.Turn{AgentID: j.agentID, N: m.turn, Status: turnRunning, Started: now}
	if m.event == "turn_start" {
		var ts turnStart
		_ = json.Unmarshal(m.data, &ts)
		t.Prompt = ts.Prompt
		t.Result, _ = json.Marshal(turnResult{Turn: m.turn, Prompt: ts.Prompt, Started: now, Running: true})
	} else {
		var res turnResult
		if err := json.Unmarshal(m.data, &res); err != nil {
			j.log.Warn("journal: turn result", "agent", j.agentID, "err", err)
			return
		}
		t.Prompt, t.Started, t.Result, t.Ended, t.Status = res.Prompt, res.Started, m.data, now, turnDone
		switch {
		case res.Kind == KindInterrupted:
			t.Status = turnInterrupted
		case res.Error != "":
			t.Status = turnFailed
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := j.st.PutTurn(ctx, t); err != nil {
		j.log.Warn("journal: store turn", "agent", j.agentID, "turn", m.turn, "err", err)
	}
}

// sync waits until every message added so far is written.
func (j *journal) sync() {
	j.mu.Lock()
	for len(j.pending) > 0 || j.writing {
		j.idle.Wait()
	}
	j.mu.Unlock()
}

// subscribe returns a channel of the batches written from now on, and the
// last id written before them: a subscriber replays from the store up to
// it, then reads the channel.
func (j *journal) subscribe() (ch chan []message, upTo int64, cancel func()) {
	ch = make(chan []message, watcherBuffer)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		close(ch)
		return ch, j.flushed, func() {}
	}
	j.subs[ch] = struct{}{}
	return ch, j.flushed, func() {
		j.mu.Lock()
		if _, ok := j.subs[ch]; ok {
			delete(j.subs, ch)
			close(ch)
		}
		j.mu.Unlock()
	}
}

// close writes what is pending and ends the subscriptions.
func (j *journal) close() {
	j.sync()
	j.mu.Lock()
	if !j.closed {
		j.closed = true
		for ch := range j.subs {
			delete(j.subs, ch)
			close(ch)
		}
		close(j.wake)
	}
	j.mu.Unlock()
}

// observe feeds the library agent's turns into the journal.
func (j *journal) observe(ag *sandboxagent.Agent) (stop func()) {
	_, stop = ag.Observe(func(t sandboxagent.TurnRecord, e *sandboxagent.Event) {
		switch {
		case e != nil:
			j.add(t.Turn, "event", e)
		case t.Running:
			j.add(t.Turn, "turn_start", turnStart{Turn: t.Turn, Prompt: t.Prompt})
		default:
			j.add(t.Turn, "turn_end", turnJSON(t, false))
		}
	})
	return stop
}

// turnStart is the data of a turn_start message.
type turnStart struct {
	Turn   int    `json:"turn"`
	Prompt string `json:"prompt"`
}
