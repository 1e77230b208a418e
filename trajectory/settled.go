package trajectory

// InFlight reports whether a completion exchange has begun whose answer
// is not complete yet (neither a terminal event nor the exchange's end
// was seen).
func (r *Record) InFlight() bool {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	for x := range r.open { // the others ended
		if !x.completed && !x.failed {
			return true
		}
	}
	return false
}

// Settled reports whether the record says the agent loop is over: nothing
// is in flight, and either the model's last agent-loop answer asked for no
// tool (FinalAnswer), or the last agent-loop exchange (by Begin order:
// one whose request offered tools, or any when none did) failed while no
// call the model asked for waits for its result (PendingCalls). A failed
// side request (one offering no tools, as a tool in the sandbox holding
// the proxy's token can send) settles nothing, nor does a failure while
// a tool runs. A Record with no exchange is not settled. It waits for
// pending request parses.
func (r *Record) Settled() bool {
	if r.InFlight() {
		return false
	}
	if _, ok := r.FinalAnswer(); ok { // waits
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	anyTools := r.offeredTools()
	var last *Exchange
	for _, x := range r.xs {
		if anyTools && !x.offersTools {
			continue
		}
		if last == nil || x.n > last.n {
			last = x
		}
	}
	return last != nil && last.failed && r.pendingCalls() == 0
}
