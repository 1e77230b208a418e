package audit

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Network is an agent's audit of its boundary: one line per model
// request (model.jsonl) and per egress decision (egress.jsonl), in
// <Root>/<date>/<Name>/. The files open on first use. Set the fields
// before the first record; methods are safe for concurrent use.
type Network struct {
	Root    string
	Date    time.Time    // the date folder's
	Name    string       // the folder: the sandbox's name
	Secrets []string     // redacted from every line
	Log     *slog.Logger // a failed write is warned about once; nil: slog.Default()

	// Max bounds each file's bytes (0: none): a sandbox can make requests
	// (and so lines) as fast as it likes. Past it lines are counted, and
	// the count is the file's last line at Close.
	Max int64

	mu      sync.Mutex
	files   map[string]*Lines
	written map[string]int64
	dropped map[string]int64
	warned  bool
	closed  bool // a late record (a handler outliving Close) is dropped
}

// Dir is the folder of the files.
func (n *Network) Dir() string { return Folder(n.Root, n.Date, n.Name) }

// Model writes one record of the model proxy to model.jsonl.
func (n *Network) Model(v any) { n.write("model.jsonl", v) }

// Egress writes one decision of the egress proxy to egress.jsonl.
func (n *Network) Egress(v any) { n.write("egress.jsonl", v) }

func (n *Network) write(file string, v any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if n.files == nil {
		n.files = map[string]*Lines{}
		n.written = map[string]int64{}
		n.dropped = map[string]int64{}
	}
	if n.Max > 0 && n.written[file] >= n.Max {
		n.dropped[file]++
		return
	}
	l := n.files[file]
	var err error
	if l == nil {
		if l, err = OpenLines(n.Root, n.Date, n.Name, file, n.Secrets); err == nil {
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
		log := n.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("sandbox-agent: network audit write failed", "err", err)
	}
}

// Close writes each file's count of records left out past Max as its
// last line and closes the files; later records are dropped.
func (n *Network) Close() {
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
