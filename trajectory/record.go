package trajectory

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Default bounds. A Record is fed by an upstream the host trusts, but a
// turn can be long and a buggy or hostile upstream endless: memory must
// stay bounded whatever it sends.
const (
	// MaxKept bounds the text, reasoning, tool arguments and tool results
	// kept per Record (each part, call and result also counts a fixed
	// overhead). Past it the Record is marked truncated and drops the rest.
	MaxKept = 16 << 20
	// MaxLine bounds one SSE event's data and a non-streamed JSON body;
	// longer ones are skipped and mark the Record truncated.
	MaxLine = 8 << 20
	// MaxRequest bounds a buffered request body; a longer one is not
	// parsed (its exchange's request counts as unparsed, and the Record
	// is marked truncated).
	MaxRequest = 32 << 20
	// MaxRequestBytes bounds the request bytes a Record buffers at once,
	// over all its exchanges in flight: an exchange whose next chunk
	// would pass it stops buffering, as past MaxRequest.
	MaxRequestBytes = 128 << 20
	// MaxExchanges bounds the exchanges a Record keeps: past it Begin
	// returns nil (the request is not recorded) and the Record is marked
	// truncated.
	MaxExchanges = 10000
)

// overhead is what a part, call or result costs besides its text, so that
// a stream of tiny parts cannot grow the Record without bound.
const overhead = 128

type limits struct {
	kept      int64
	line      int
	request   int
	reqBytes  int64
	exchanges int
}

// Record is what the model proxy saw of one turn: every completion
// exchange, the model's answers parsed as they streamed, and the tool
// results the CLI sent back. It is safe for concurrent use; the zero value
// is ready.
type Record struct {
	lim limits // zero: the defaults (tests shrink them)

	mu        sync.Mutex
	xs        []*Exchange
	calls     []*call          // every tool call, in order of appearance
	callByID  map[string]*call // by the model's call id
	results   map[string]*result
	nResults  int
	kept      int64
	truncated bool
	doneSeq   int // orders completed responses
	sec       *secrets

	open  map[*Exchange]struct{} // begun, End not applied yet
	ended []*Exchange            // in order of End applied
	ci    callIndex              // the calls of ended exchanges (see index.go)

	// The response side's queue (see queue.go).
	q       queue
	applyMu sync.Mutex // held while queued calls are applied

	// The request side: bytes buffered, and the parse queue (queue.go).
	reqBytes atomic.Int64
	pq       parseQueue

	text  [2]textIndex // by partKind (see index.go)
	resMu sync.Mutex   // serialises result matching (the results' prepared forms)
}

func (r *Record) limits() limits {
	l := r.lim
	if l.kept == 0 {
		l.kept = MaxKept
	}
	if l.line == 0 {
		l.line = MaxLine
	}
	if l.request == 0 {
		l.request = MaxRequest
	}
	if l.reqBytes == 0 {
		l.reqBytes = MaxRequestBytes
	}
	if l.exchanges == 0 {
		l.exchanges = MaxExchanges
	}
	return l
}

// take accounts n more kept bytes; false (and truncated) past the bound.
// r.mu is held.
func (r *Record) take(x *Exchange, n int) bool {
	if r.kept+int64(n) > r.limits().kept {
		r.truncated = true
		if x != nil {
			x.truncated = true
		}
		return false
	}
	r.kept += int64(n)
	return true
}

// Begin starts recording one forwarded request. It returns nil for routes
// that are not completions (see DetectAPI), and past MaxExchanges (the
// Record is then truncated); the methods of a nil
// *Exchange do nothing, so a nil result may be used like any other (but
// note that a nil *Exchange in an interface is not a nil interface).
func (r *Record) Begin(method, path string) *Exchange {
	api := DetectAPI(method, path)
	if api == "" {
		return nil
	}
	lim := r.limits()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.xs) >= lim.exchanges {
		r.truncated = true
		return nil
	}
	x := &Exchange{r: r, api: api, lim: lim, reqDone: make(chan struct{})}
	r.xs = append(r.xs, x)
	x.n = len(r.xs)
	if r.open == nil {
		r.open = map[*Exchange]struct{}{}
	}
	r.open[x] = struct{}{}
	return x
}

// Exchange records one completion request and its response. Its methods
// have the shape of the model proxy's tap: RequestBody may run on another
// goroutine than the others; Response, ResponseBody and End run on one
// goroutine in that order, End once and last. Response, ResponseBody and
// End only queue what they get (see queue.go).
type Exchange struct {
	r   *Record
	api API
	n   int // 1-based, in Begin order
	lim limits

	// Request side. RequestBody runs on the transport's goroutine.
	reqMu     sync.Mutex
	reqBuf    [][]byte // blocks of reqBlock bytes: growing never copies
	reqLen    int
	reqOver   bool
	reqClosed bool // parsed or given up: later bytes are dropped

	parseMu   sync.Mutex // serialises request parses
	reqParsed bool       // under parseMu
	triedLen  int        // under parseMu: a parse before End failed at this length
	endOnce   sync.Once
	reqDone   chan struct{} // closed once End's request parse finished

	// Response framing: only under r.applyMu (see queue.go).
	sc scanner

	// Everything below is under r.mu.
	reqState    reqState
	model       string
	offersTools bool
	stream      bool

	status    int
	parts     []*part
	partBy    map[string]*part
	calls     []*call
	callBy    map[string]*call
	stop      string // the API's stop reason / finish reason / status
	completed bool   // a terminal event (or whole JSON answer) was seen
	doneSeq   int
	ended     bool
	failed    bool // HTTP error, transport error or error event
	unparsed  bool // the response could not be read (encoding, framing, bound)
	badEvents int  // events that were not JSON
	truncated bool

	ver     [2]uint32 // by partKind: bumped when a part of the kind changes
	form    [2][]byte // by partKind: the cached text form (see index.go)
	formVer [2]uint32
	formOK  [2]bool
}

type reqState int

const (
	reqPending reqState = iota
	reqOK
	reqUnparsed
)

type partKind uint8

const (
	kindText partKind = iota
	kindReasoning
)

// part is one text or reasoning block, with its whitespace-normalised,
// redacted form kept alongside so that queries need not re-normalise
// megabytes: red is raw[:redOff] redacted and normalised; raw[redOff:]
// is a proper prefix of a secret that the next delta may complete.
type part struct {
	kind   partKind
	raw    []byte
	red    normBuf
	redOff int
	lead   bool // raw starts with whitespace
}

type call struct {
	ToolCall
	args      []byte
	fromStart bool // args are content_block_start's placeholder input
	pos       int  // index in Record.calls

	ver    uint32 // bumped when args change
	keyVer uint32 // the ver canon and forms were computed at
	keyOK  bool
	canon  string   // the arguments (redacted) as canonical JSON
	forms  []string // the shell command forms they carry (see CommandMatches)
}

type result struct {
	output  string
	isError bool
	n       int  // the exchange whose request carried it
	lost    bool // dropped for MaxKept: the call has a result, not kept
	prep    *sentForm
}

// RequestBody buffers a chunk of the request body (p is not retained).
func (x *Exchange) RequestBody(p []byte) {
	if x == nil || len(p) == 0 {
		return
	}
	x.reqMu.Lock()
	switch {
	case x.reqClosed || x.reqOver:
	case x.reqLen+len(p) > x.lim.request:
		x.reqOver = true
		x.releaseReq()
	case x.r.reqBytes.Add(int64(len(p))) > x.lim.reqBytes:
		x.r.reqBytes.Add(-int64(len(p)))
		x.reqOver = true
		x.releaseReq()
	default:
		x.reqLen += len(p)
		for len(p) > 0 {
			n := len(x.reqBuf)
			if n == 0 || len(x.reqBuf[n-1]) == cap(x.reqBuf[n-1]) {
				x.reqBuf = append(x.reqBuf, blockPool.Get().(*[reqBlock]byte)[:0])
				n++
			}
			b := x.reqBuf[n-1]
			k := copy(b[len(b):cap(b)], p)
			x.reqBuf[n-1] = b[:len(b)+k]
			p = p[k:]
		}
	}
	x.reqMu.Unlock()
}

// reqBlock is the size of a request buffer block.
const reqBlock = 64 << 10

// Response notes the status and how the body is framed.
func (x *Exchange) Response(status int, header http.Header) {
	if x == nil {
		return
	}
	o := op{x: x, kind: opResponse, status: status, mode: modeSniff}
	switch {
	case status < 200 || status > 299:
		o.mode = modeOff // an error body is no answer
	case header.Get("Content-Encoding") != "" && !strings.EqualFold(header.Get("Content-Encoding"), "identity"):
		o.mode, o.unparsed = modeOff, true
	default:
		mt, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
		switch {
		case mt == "text/event-stream":
			o.mode = modeSSE
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			o.mode = modeJSON
		}
	}
	x.r.enqueue(o, nil)
}

func (x *Exchange) applyResponse(o *op) {
	x.r.mu.Lock()
	x.status = o.status
	if o.status < 200 || o.status > 299 {
		x.failed = true
	}
	if o.unparsed {
		x.unparsed = true
	}
	x.r.mu.Unlock()
	x.sc.mode = o.mode
}

// ResponseBody queues a chunk of the upstream's answer for parsing (p is
// not retained). The proxy forwards it once this returns; every query
// made after that parses what is queued first, so by the time the CLI
// can print a part or a call, a query sees it.
func (x *Exchange) ResponseBody(p []byte) {
	if x == nil || len(p) == 0 {
		return
	}
	x.r.enqueue(op{x: x, kind: opBody}, p)
}

// End closes the exchange. The request is parsed by the Record's parse
// worker (one at most, in End order), off the proxy's path; queries that
// need it wait for it.
func (x *Exchange) End(err error) {
	if x == nil {
		return
	}
	x.endOnce.Do(func() {
		x.r.enqueue(op{x: x, kind: opEnd, err: err}, nil)
		x.r.enqueueParse(x)
	})
}

func (x *Exchange) applyEnd(err error) {
	x.sc.finish(x)
	r := x.r
	r.mu.Lock()
	x.ended = true
	if err != nil && !x.completed {
		x.failed = true
	}
	for _, p := range x.parts {
		p.flush(r.sec)
	}
	delete(r.open, x)
	r.ended = append(r.ended, x)
	for _, c := range x.calls {
		r.ci.add(c, r.sec)
	}
	r.mu.Unlock()
}

func (x *Exchange) markUnparsed() {
	x.r.mu.Lock()
	x.unparsed = true
	x.r.mu.Unlock()
}

// handle parses one SSE event's data, or a whole JSON answer.
func (x *Exchange) handle(data []byte) {
	var err error
	switch x.api {
	case AnthropicMessages:
		err = x.anthropic(data)
	case OpenAIChat:
		err = x.chat(data)
	case OpenAIResponses:
		err = x.responses(data)
	}
	if err != nil {
		x.r.mu.Lock()
		x.badEvents++
		x.r.mu.Unlock()
	}
}

// ---- helpers for the API parsers; r.mu is held ----

func (x *Exchange) part(key string, kind partKind) *part {
	if p := x.partBy[key]; p != nil {
		return p
	}
	if !x.r.take(x, overhead) {
		return nil
	}
	p := &part{kind: kind}
	x.ver[kind]++
	if x.partBy == nil {
		x.partBy = map[string]*part{}
	}
	x.partBy[key] = p
	x.parts = append(x.parts, p)
	return p
}

// appendPart adds a delta to a part.
func (x *Exchange) appendPart(key string, kind partKind, s string) {
	if s == "" {
		return
	}
	p := x.part(key, kind)
	if p == nil || !x.r.take(x, len(s)) {
		return
	}
	if len(p.raw) == 0 {
		p.lead = isSpace(s[0])
	}
	p.raw = append(p.raw, s...)
	x.ver[kind]++
	p.advance(x.r.sec, s)
}

// advance redacts and normalises what of raw can be now (s was just
// appended).
func (p *part) advance(sec *secrets, s string) {
	if sec.none() {
		p.red.add(s)
		p.redOff = len(p.raw)
		return
	}
	out, rest := sec.replace(nil, p.raw[p.redOff:], true)
	p.red.add(string(out))
	p.redOff = len(p.raw) - len(rest)
}

// flush redacts the held tail: the part is whole.
func (p *part) flush(sec *secrets) {
	if p.redOff < len(p.raw) {
		out, _ := sec.replace(nil, p.raw[p.redOff:], false)
		p.red.add(string(out))
		p.redOff = len(p.raw)
	}
}

// visible is the part's redacted, normalised text, with the held tail.
func (p *part) visible(sec *secrets) normBuf {
	if p.redOff == len(p.raw) {
		return p.red
	}
	n := normBuf{b: append([]byte(nil), p.red.b...), pending: p.red.pending}
	out, _ := sec.replace(nil, p.raw[p.redOff:], false)
	n.add(string(out))
	return n
}

// fillPart sets a part from a whole-text event (…done, a finished item, a
// non-streamed answer) unless deltas already filled it: both come from the
// upstream, and the deltas were what the CLI saw first.
func (x *Exchange) fillPart(key string, kind partKind, s string) {
	if s == "" {
		return
	}
	if p := x.partBy[key]; p != nil && len(p.raw) > 0 {
		return
	}
	x.appendPart(key, kind, s)
}

// callFor returns the call under key, creating it.
func (x *Exchange) callFor(key, kind string) *call {
	if c := x.callBy[key]; c != nil {
		return c
	}
	if !x.r.take(x, overhead) {
		return nil
	}
	c := &call{ToolCall: ToolCall{Kind: kind, Exchange: x.n}, pos: len(x.r.calls)}
	if x.callBy == nil {
		x.callBy = map[string]*call{}
	}
	x.callBy[key] = c
	x.calls = append(x.calls, c)
	x.r.calls = append(x.r.calls, c)
	return c
}

// setID gives a call its id once (the first id the model sent wins).
func (x *Exchange) setID(c *call, id string) {
	if c == nil || id == "" || c.ID != "" {
		return
	}
	c.ID = id
	if x.r.callByID == nil {
		x.r.callByID = map[string]*call{}
	}
	if _, dup := x.r.callByID[id]; !dup {
		x.r.callByID[id] = c
	}
}

func (x *Exchange) setName(c *call, name string) {
	if c != nil && c.Name == "" {
		c.Name = name
	}
}

func (x *Exchange) appendArgs(c *call, s string) {
	if c == nil || s == "" {
		return
	}
	if c.fromStart {
		x.r.kept -= int64(len(c.args))
		c.args, c.fromStart = c.args[:0], false
	}
	c.ver++
	if !x.r.take(x, len(s)) {
		return
	}
	c.args = append(c.args, s...)
}

// setArgs replaces a call's arguments with the whole value the upstream
// sent at the end (equal to the deltas unless some were dropped).
func (x *Exchange) setArgs(c *call, s string) {
	if c == nil || string(c.args) == s {
		return
	}
	x.r.kept -= int64(len(c.args))
	c.args, c.fromStart = c.args[:0], false
	c.ver++
	if !x.r.take(x, len(s)) {
		return
	}
	c.args = append(c.args, s...)
}

// complete marks the response finished, with its stop reason.
func (x *Exchange) complete(stop string) {
	if stop != "" {
		x.stop = stop
	}
	if x.completed {
		return
	}
	x.completed = true
	x.r.doneSeq++
	x.doneSeq = x.r.doneSeq
	for _, c := range x.calls {
		c.Complete = true
	}
}

// clientCalls counts the calls the CLI must run (not the provider's own
// server-side tools).
func (x *Exchange) clientCalls() int {
	n := 0
	for _, c := range x.calls {
		if c.Kind != KindServer {
			n++
		}
	}
	return n
}

// endsLoop reports whether the response finished without asking the CLI
// for a tool: the agent loop stops there.
func (x *Exchange) endsLoop() bool {
	if !x.completed || x.failed || x.clientCalls() > 0 {
		return false
	}
	switch x.stop {
	case "tool_use", "tool_calls", "function_call", "pause_turn", "failed":
		return false
	}
	return true
}

// unmarshal decodes JSON; it exists so the parsers read uniformly.
func unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
