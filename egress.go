package sandboxagent

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sandbox-agent/sandbox-agent/egressproxy"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// Egress is a sandbox's network policy (docs/security.md). It is enforced
// by the network: a sandbox under EgressNone or EgressModel has no network
// interface but loopback, so nothing in it can connect anywhere or resolve
// a name, whatever it does with proxy variables.
type Egress string

const (
	// EgressNone: no network at all (with an allow-list: only its egress
	// proxy). The default of a bare sandbox.
	EgressNone Egress = "none"
	// EgressModel: no network, except the host's model proxy (and an
	// allow-list's egress proxy). Agents' default; for a bare sandbox the
	// same as EgressNone.
	EgressModel Egress = "model"
	// EgressOpen: the engine's bridge network, unrestricted. An explicit
	// opt-in: the agent can reach the internet and the host's services.
	EgressOpen Egress = "open"
)

// ParseEgress checks a policy name ("" stays "": the caller's default).
func ParseEgress(s string) (Egress, error) {
	switch e := Egress(s); e {
	case "", EgressNone, EgressModel, EgressOpen:
		return e, nil
	}
	return "", fmt.Errorf("%w: egress %q (want none, model or open)", ErrInvalidArgument, s)
}

// CheckAllowHosts validates allow-list patterns: host names, "*.domain"
// wildcards (subdomains only), optionally with ":PORT".
func CheckAllowHosts(hosts []string) error {
	for _, h := range hosts {
		if err := egressproxy.ValidPattern(h); err != nil {
			return fmt.Errorf("%w: allow host %q: %w", ErrInvalidArgument, h, err)
		}
	}
	return nil
}

// modelRecord audits one request through the model proxy and counts it
// to the running turn.
func (a *Agent) modelRecord(r modelproxy.Record) {
	if a.net != nil {
		a.net.Model(r)
	}
	if h := a.hooks.ModelRequest; h != nil { // every request, a turn's or not; no lock held
		h(*a.turnCtx.Load(), telemetry.ModelRequest{Driver: a.drv.Name(), Model: r.Model, Status: r.Status, Usage: r.Usage,
			Refused: r.Budget, Started: r.Time, Duration: time.Duration(r.DurationMS * float64(time.Millisecond))})
	}
	a.deniedMu.Lock()
	defer a.deniedMu.Unlock()
	if !a.inTurn {
		return
	}
	if r.Budget && a.turnBudget == "" {
		a.turnBudget = r.Error
	}
	if r.Usage != nil {
		a.turnSpent.Requests++
		a.turnSpent.Usage = a.turnSpent.Usage.Add(*r.Usage)
		if cost, ok := a.meter.Cost(r.Model, *r.Usage); ok {
			a.turnSpent.CostUSD += cost
		} else {
			a.turnSpent.UnpricedTokens += r.Usage.Tokens()
		}
	}
}

// egressRecord audits an egress decision and queues a denial during a
// turn as an egress_denied event. It runs on the proxy's goroutine and
// takes no lock a turn or a callback holds (a callback may Close the
// agent): the turn emits the queue from its own goroutine, at its next
// line and when its CLI exits.
func (a *Agent) egressRecord(r egressproxy.Record) {
	if a.net != nil {
		a.net.Egress(r)
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

// setInTurn starts (on) or ends counting egress denials and model
// requests to the turn; it returns what the turn's requests used and why
// the budget refused one ("": none was refused).
func (a *Agent) setInTurn(on bool) (metering.Spent, string) {
	a.deniedMu.Lock()
	defer a.deniedMu.Unlock()
	a.inTurn = on
	spent, budget := a.turnSpent, a.turnBudget
	if on {
		a.turnSpent, a.turnBudget = metering.Spent{}, ""
	}
	return spent, budget
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
