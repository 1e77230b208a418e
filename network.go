package sandboxagent

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/sandbox-agent/sandbox-agent/audit"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

// networkLog is an agent's audit of its boundary: one line per model
// request (model.jsonl) and per egress decision (egress.jsonl), in
// <audit_root>/<date>/<sandbox name>/. The files open on first use.
type networkLog struct {
	root, folder string
	date         time.Time
	secrets      []string
	log          *slog.Logger

	// max bounds each file's bytes: a sandbox can make requests (and
	// so lines) as fast as it likes. Past it lines are counted, and the
	// count is the file's last line at close.
	max int64

	mu      sync.Mutex
	files   map[string]*audit.Lines
	written map[string]int64
	dropped map[string]int64
	warned  bool
	closed  bool // a late record (a handler outliving Close) is dropped
}

func (n *networkLog) dir() string { return audit.Folder(n.root, n.date, n.folder) }

func (n *networkLog) write(file string, v any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if n.files == nil {
		n.files = map[string]*audit.Lines{}
		n.written = map[string]int64{}
		n.dropped = map[string]int64{}
	}
	if n.max > 0 && n.written[file] >= n.max {
		n.dropped[file]++
		return
	}
	l := n.files[file]
	var err error
	if l == nil {
		if l, err = audit.OpenLines(n.root, n.date, n.folder, file, n.secrets); err == nil {
			n.files[file] = l
		}
	}
	if err == nil {
		var size int64
		size, err = l.WriteSized(v)
		n.written[file] += size
	}
	if err != nil && !n.warned {
		n.warned = true
		n.log.Warn("sandbox-agent: network audit write failed", "err", err)
	}
}

func (n *networkLog) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, l := range n.files {
		if d := n.dropped[name]; d > 0 {
			_, _ = l.WriteSized(map[string]any{"time": time.Now().UTC(), "dropped": d,
				"error": fmt.Sprintf("max_audit_session_bytes: %d later records were not written", d)})
		}
		l.Close()
	}
	n.files = nil
	n.closed = true
}

// modelRecord audits one request through the model proxy.
func (a *Agent) modelRecord(r modelproxy.Record) {
	if a.net != nil {
		a.net.write("model.jsonl", r)
	}
}

// egressRecord audits an egress decision and queues a denial during a
// turn as an egress_denied event. It runs on the proxy's goroutine and
// takes no lock a turn or a callback holds (a callback may Close the
// agent): the turn emits the queue from its own goroutine, at its next
// line and when its CLI exits.
func (a *Agent) egressRecord(r EgressRecord) {
	if a.net != nil {
		a.net.write("egress.jsonl", r)
	}
	if r.Allowed {
		return
	}
	host := r.Host + ":" + strconv.Itoa(r.Port)
	ev := Event{Kind: KindEgressDenied, Time: time.Now().UTC(), Payload: Payload{
		Host: host, Text: fmt.Sprintf("egress to %s denied: %s", host, r.Reason), IsError: true,
	}}
	a.deniedMu.Lock()
	defer a.deniedMu.Unlock()
	if a.inTurn && len(a.denied) < maxQueuedDenials {
		a.denied = append(a.denied, ev)
	}
}

// maxQueuedDenials bounds the queue: a sandbox hammering the proxy must
// not grow the host's memory (egress.jsonl still has every line).
const maxQueuedDenials = 1000

func (a *Agent) setInTurn(on bool) {
	a.deniedMu.Lock()
	defer a.deniedMu.Unlock()
	a.inTurn = on
}

// emitDenied emits the queued denials; called from the turn's goroutines.
func (t *turn) emitDenied() {
	a := t.a
	a.deniedMu.Lock()
	evs := a.denied
	a.denied = nil
	a.deniedMu.Unlock()
	for _, ev := range evs {
		t.emit(ev)
	}
}
