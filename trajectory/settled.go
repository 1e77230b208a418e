package trajectory

// InFlight reports whether a completion exchange has begun whose answer
// is not complete yet (neither a terminal event nor the exchange's end
// was seen).
func (r *Record) InFlight() bool {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.xs {
		if !x.completed && !x.ended && !x.failed {
			return true
		}
	}
	return false
}

// Settled reports whether the record says the agent loop is over: nothing
// is in flight and the model's last agent-loop answer asked for no tool
// (FinalAnswer), or the last exchange failed. A Record with no exchange
// is not settled. It waits for pending request parses.
func (r *Record) Settled() bool {
	if r.InFlight() {
		return false
	}
	if _, ok := r.FinalAnswer(); ok {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var last *Exchange
	for _, x := range r.xs {
		if last == nil || x.n > last.n {
			last = x
		}
	}
	return last != nil && last.failed
}
