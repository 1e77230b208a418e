package trajectory

import (
	"bytes"
	"encoding/json"
	"index/suffixarray"
	"slices"
	"sync"
)

// Queries are priced by what the sandbox prints: a tool can print any
// number of forged events, each checked against the Record. So no query
// costs a pass over the whole Record:
//
//   - HasText and HasReasoning search a text index per kind (textIndex):
//     the forms of the ended exchanges (see formOf), appended once when
//     an exchange ends, under a suffix array built when the linear scans
//     since the last build have cost as much as a build would (so a
//     flood of queries pays O(len(needle)·log n) each, and a Record
//     queried a few times never builds one). Exchanges still streaming
//     are scanned, their forms cached until a part of theirs changes.
//   - FindToolCall and FindCommand look calls up by canonical arguments
//     and by command form (callIndex), computed once when the call's
//     exchange ends; calls still streaming are compared by their cached
//     keys, recomputed only when their arguments changed.
//   - ToolResult and ResultMatches wait only for what is pending
//     (waitParsed) and match against a result's normalised forms,
//     prepared once (sentForm).

// buildFactor: a suffix array is built once the linear scans of the
// unindexed text cost buildFactor times its length (a build costs a few
// tens of scans); minBuild: smaller unindexed text is always scanned.
var (
	buildFactor = 16
	minBuild    = 256 << 10 // tests lower it
)

// textIndex is an append-only corpus of normalised text, each form
// followed by '\n' (which no normalised needle holds, so a match never
// spans two forms), searched by suffix array up to built, linearly past.
type textIndex struct {
	mu    sync.Mutex // held around r.mu, never inside it
	data  []byte
	next  int // Record.ended[:next] are in data
	built int
	ix    *suffixarray.Index
	work  int // bytes scanned since the last build
}

func (t *textIndex) add(f []byte) {
	if len(f) > 0 {
		t.data = append(append(t.data, f...), '\n')
	}
}

func (t *textIndex) contains(needle []byte) bool {
	tail := t.data[t.built:]
	if len(tail) >= minBuild && t.work+len(tail) >= buildFactor*len(t.data) {
		t.ix = suffixarray.New(t.data)
		t.built, t.work, tail = len(t.data), 0, nil
	}
	if t.ix != nil && len(t.ix.Lookup(needle, 1)) > 0 {
		return true
	}
	t.work += len(tail)
	return bytes.Contains(tail, needle)
}

// formOf is what a text query searches in one exchange for one kind: the
// part's text when it has one part, else the parts joined without a
// separator, then '\n', then joined by a space (a CLI may print a
// response's parts as one message either way); each part's text occurs
// in the first. Normalised and redacted. It is cached until a part of
// the kind changes. r.mu is held.
func (x *Exchange) formOf(kind partKind) []byte {
	if x.formOK[kind] && x.formVer[kind] == x.ver[kind] {
		return x.form[kind]
	}
	sec := x.r.sec
	var ps []*part
	for _, p := range x.parts {
		if p.kind == kind {
			ps = append(ps, p)
		}
	}
	var f []byte
	switch len(ps) {
	case 0:
	case 1:
		f = ps[0].visible(sec).b
	default:
		f = append(joinForm(ps, sec, ""), '\n')
		f = append(f, joinForm(ps, sec, " ")...)
	}
	x.form[kind], x.formVer[kind], x.formOK[kind] = f, x.ver[kind], true
	return f
}

// joinForm normalises the parts' texts joined by sep, from their
// normalised forms (whitespace at a part's edges is kept as such).
func joinForm(ps []*part, sec *secrets, sep string) []byte {
	var n normBuf
	for i, p := range ps {
		if i > 0 {
			n.add(sep)
		}
		v := p.visible(sec)
		if p.lead {
			n.pending = true
		}
		n.add(string(v.b))
		if v.pending {
			n.pending = true
		}
	}
	return n.b
}

// has is HasText and HasReasoning.
func (r *Record) has(kind partKind, s string) bool {
	n := normalize(s)
	if n == "" {
		return true
	}
	needle := []byte(n)
	r.sync()
	t := &r.text[kind]
	t.mu.Lock()
	defer t.mu.Unlock()
	r.mu.Lock()
	for ; t.next < len(r.ended); t.next++ {
		x := r.ended[t.next]
		t.add(x.formOf(kind))
		// The form is now in the index: drop the Exchange's copies.
		x.form[kind], x.formOK[kind] = nil, false
		for _, p := range x.parts {
			if p.kind == kind {
				p.red = normBuf{}
			}
		}
		x.ver[kind]++
	}
	for x := range r.open {
		if bytes.Contains(x.formOf(kind), needle) {
			r.mu.Unlock()
			return true
		}
	}
	r.mu.Unlock()
	return t.contains(needle)
}

// callKeys computes a call's canonical arguments and command forms when
// its arguments changed since. r.mu is held.
func (c *call) keys(sec *secrets) {
	if c.keyOK && c.keyVer == c.ver {
		return
	}
	c.keyOK, c.keyVer = true, c.ver
	tc := ToolCall{Arguments: sec.str(string(c.args))}
	c.canon, _ = canonical(tc.Input())
	c.forms = callCommandForms(tc.Arguments)
}

// canonical is a JSON value re-encoded so that values equal as JSON
// (key order, spacing, number spelling) encode the same.
func canonical(raw json.RawMessage) (string, bool) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	b, err := json.Marshal(v)
	return string(b), err == nil
}

// callIndex holds the calls of ended exchanges (whose arguments are
// final) by canonical arguments, by name and by command form, each list
// in call order.
type callIndex struct {
	byCanon map[string][]*call
	byName  map[string][]*call
	byForm  map[string][]*call
}

func (ci *callIndex) add(c *call, sec *secrets) {
	if ci.byCanon == nil {
		ci.byCanon, ci.byName, ci.byForm = map[string][]*call{}, map[string][]*call{}, map[string][]*call{}
	}
	c.keys(sec)
	insert(ci.byCanon, c.canon, c)
	insert(ci.byName, c.Name, c)
	for _, f := range c.forms {
		insert(ci.byForm, f, c)
	}
}

// insert adds c to m[k], keeping call order (exchanges may end out of
// order).
func insert(m map[string][]*call, k string, c *call) {
	l := m[k]
	i := len(l)
	for i > 0 && l[i-1].pos > c.pos {
		i--
	}
	m[k] = slices.Insert(l, i, c)
}

// earlier returns whichever of a and b came first (nil is last).
func earlier(a, b *call) *call {
	if a == nil || (b != nil && b.pos < a.pos) {
		return b
	}
	return a
}

// sentForm is a tool result prepared for OutputMatches.
type sentForm struct {
	s, nb       string // normalised; the envelope's body normalised
	placeholder bool
	pieces      []string // normalised pieces between cut markers (when two or more)
	nbIx        textIndex
}

func prepareSent(sent string) *sentForm {
	f := &sentForm{s: normalize(sent)}
	body := sent
	if b, ok := envelopeBody(sent); ok {
		body = b
	}
	f.nb = normalize(body)
	f.placeholder = placeholderRE.MatchString(f.s)
	var pieces []string
	for _, p := range inlineCutRE.Split(body, -1) {
		pieces = append(pieces, cutLineRE.Split(p, -1)...)
	}
	if len(pieces) >= 2 {
		for _, p := range pieces {
			if p = normalize(p); p != "" {
				f.pieces = append(f.pieces, p)
			}
		}
	}
	f.nbIx.data = []byte(f.nb)
	return f
}
