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

	mu     sync.Mutex
	files  map[string]*audit.Lines
	warned bool
}

func (n *networkLog) dir() string { return audit.Folder(n.root, n.date, n.folder) }

func (n *networkLog) write(file string, v any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.files == nil {
		n.files = map[string]*audit.Lines{}
	}
	l := n.files[file]
	var err error
	if l == nil {
		if l, err = audit.OpenLines(n.root, n.date, n.folder, file, n.secrets); err == nil {
			n.files[file] = l
		}
	}
	if err == nil {
		err = l.Write(v)
	}
	if err != nil && !n.warned {
		n.warned = true
		n.log.Warn("sandbox-agent: network audit write failed", "err", err)
	}
}

func (n *networkLog) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range n.files {
		l.Close()
	}
	n.files = nil
}

// modelRecord audits one request through the model proxy.
func (a *Agent) modelRecord(r modelproxy.Record) {
	if a.net != nil {
		a.net.write("model.jsonl", r)
	}
}

// egressRecord audits an egress decision and, for a denial during a
// turn, adds an egress_denied event to the turn's stream.
func (a *Agent) egressRecord(r EgressRecord) {
	if a.net != nil {
		a.net.write("egress.jsonl", r)
	}
	if r.Allowed {
		return
	}
	a.curMu.Lock()
	defer a.curMu.Unlock()
	t := a.cur
	if t == nil {
		return
	}
	host := r.Host + ":" + strconv.Itoa(r.Port)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.emit(Event{Kind: KindEgressDenied, Payload: Payload{
		Host: host, Text: fmt.Sprintf("egress to %s denied: %s", host, r.Reason), IsError: true,
	}})
}
