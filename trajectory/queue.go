package trajectory

import "sync"

// The response side is parsed off the proxy's path. Response,
// ResponseBody and End copy what they get into their Record's queue, in
// call order, and return; one worker goroutine applies the queue (frames
// and parses the answers). Every query first syncs: it applies whatever
// was queued before it (or waits for the worker to), so a query made after
// ResponseBody returned, which is before the proxy forwarded the chunk,
// sees that chunk's content, as when the parse ran on the path.
//
// The worker exists only while there is work: it exits when it finds the
// queue empty and the next call starts another, so a finished Record
// holds no goroutine.

type opKind uint8

const (
	opBody opKind = iota
	opResponse
	opEnd
)

// op is one queued call.
type op struct {
	x        *Exchange
	kind     opKind
	off, n   int // opBody: the chunk, in queue.buf
	status   int
	mode     scanMode
	unparsed bool
	err      error
}

type queue struct {
	mu      sync.Mutex
	ops     []op
	buf     []byte // the queued chunks' bytes
	running bool   // a worker goroutine is on its way or at work

	// the slices of the last batch, reused
	spareOps []op
	spareBuf []byte
}

// maxQueued bounds the bytes queued: past it a call applies the backlog
// itself before queuing more, so an upstream faster than the parser
// cannot grow the queue without bound.
const maxQueued = 4 << 20

// maxSpare bounds the chunk buffer kept for reuse.
const maxSpare = 1 << 20

func (r *Record) enqueue(o op, p []byte) {
	q := &r.q
	q.mu.Lock()
	if len(q.buf)+len(p) > maxQueued && len(q.ops) > 0 {
		q.mu.Unlock()
		r.sync()
		q.mu.Lock()
	}
	if q.buf == nil && len(p) > 0 {
		q.buf, q.spareBuf = q.spareBuf[:0], nil
	}
	o.off, o.n = len(q.buf), len(p)
	q.buf = append(q.buf, p...)
	if q.ops == nil {
		q.ops, q.spareOps = q.spareOps[:0], nil
	}
	q.ops = append(q.ops, o)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go r.work()
	}
}

// work applies the queue until it is empty, then exits.
func (r *Record) work() {
	q := &r.q
	for {
		r.sync()
		q.mu.Lock()
		if len(q.ops) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}

// sync applies every call queued before it.
func (r *Record) sync() {
	q := &r.q
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	q.mu.Lock()
	ops, buf := q.ops, q.buf
	q.ops, q.buf = nil, nil
	q.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	for i := range ops {
		o := &ops[i]
		switch o.kind {
		case opBody:
			o.x.sc.write(o.x, buf[o.off:o.off+o.n])
		case opResponse:
			o.x.applyResponse(o)
		case opEnd:
			o.x.applyEnd(o.err)
		}
	}
	clear(ops) // drop the Exchanges and errors
	q.mu.Lock()
	q.spareOps = ops[:0]
	if cap(buf) <= maxSpare {
		q.spareBuf = buf[:0]
	}
	q.mu.Unlock()
}

// The request side: End queues its exchange for the Record's parse
// worker, which parses the requests one at a time in End order and exits
// when none is left. However many exchanges end at once (a flood of
// quick failing requests), a Record runs at most one parse, and holds no
// more than its exchanges (MaxExchanges) in the queue.
type parseQueue struct {
	mu      sync.Mutex
	xs      []*Exchange
	last    *Exchange // the last one queued: once it is parsed, all are
	running bool
}

func (r *Record) enqueueParse(x *Exchange) {
	pq := &r.pq
	pq.mu.Lock()
	pq.xs = append(pq.xs, x)
	pq.last = x
	start := !pq.running
	pq.running = true
	pq.mu.Unlock()
	if start {
		go r.parseWork()
	}
}

func (r *Record) parseWork() {
	pq := &r.pq
	for {
		pq.mu.Lock()
		if len(pq.xs) == 0 {
			pq.running = false
			pq.xs = nil
			pq.mu.Unlock()
			return
		}
		x := pq.xs[0]
		pq.xs[0] = nil
		pq.xs = pq.xs[1:]
		pq.mu.Unlock()
		r.sync() // the calls the answers so far asked for
		x.parseRequest(true)
		close(x.reqDone)
	}
}

// waitParsed returns once every request queued before it was parsed.
func (r *Record) waitParsed() {
	r.pq.mu.Lock()
	last := r.pq.last
	r.pq.mu.Unlock()
	if last != nil {
		<-last.reqDone
	}
}
