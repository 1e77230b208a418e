package metering

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// ErrBudgetExceeded: a budget is spent; the model proxy refuses the next
// model request itself, without forwarding it. Raise the budget and the
// next request goes through.
var ErrBudgetExceeded = errors.New("budget exceeded")

// Budget caps spending: tokens (input and output) and US dollars. Zero
// means no limit of that kind.
type Budget struct {
	Tokens int64   `json:"tokens,omitempty"`
	USD    float64 `json:"usd,omitempty"`
}

// Zero reports whether b limits nothing.
func (b Budget) Zero() bool { return b.Tokens == 0 && b.USD == 0 }

// Validate reports a negative or non-finite limit.
func (b Budget) Validate() error {
	if b.Tokens < 0 || !(Price{Input: b.USD}).valid() {
		return fmt.Errorf("budget: limits must be finite and not negative (tokens %d, usd %v)", b.Tokens, b.USD)
	}
	return nil
}

// Spent is what a meter counted.
type Spent struct {
	Usage Usage `json:"usage"`
	// CostUSD is the cost of the usage of priced models.
	CostUSD float64 `json:"cost_usd"`
	// UnpricedTokens are tokens of models with no price: their cost is
	// unknown, and CostUSD leaves them out.
	UnpricedTokens int64 `json:"unpriced_tokens,omitempty"`
	// Requests counts the requests charged.
	Requests int64 `json:"requests"`
}

// Add returns s plus t (counts saturating).
func (s Spent) Add(t Spent) Spent {
	return Spent{Usage: s.Usage.Add(t.Usage), CostUSD: s.CostUSD + t.CostUSD,
		UnpricedTokens: sat(s.UnpricedTokens, t.UnpricedTokens), Requests: sat(s.Requests, t.Requests)}
}

// max is each count's larger of s and t.
func (s Spent) max(t Spent) Spent {
	return Spent{Usage: Usage{InputTokens: max(s.Usage.InputTokens, t.Usage.InputTokens), OutputTokens: max(s.Usage.OutputTokens, t.Usage.OutputTokens),
		CacheReadTokens: max(s.Usage.CacheReadTokens, t.Usage.CacheReadTokens), CacheWriteTokens: max(s.Usage.CacheWriteTokens, t.Usage.CacheWriteTokens)},
		CostUSD: max(s.CostUSD, t.CostUSD), UnpricedTokens: max(s.UnpricedTokens, t.UnpricedTokens), Requests: max(s.Requests, t.Requests)}
}

// ErrLedger: a meter's shared count (its Ledger) cannot be read; the
// model proxy refuses the request (a budget it cannot check is not kept).
var ErrLedger = errors.New("budget ledger unavailable")

// Ledger keeps a meter's count where several processes share one budget
// (serve's replicas on one database: a tenant's budget). A meter with one
// adds each charge there and reads the shared total before it admits a
// request.
type Ledger interface {
	// Add adds s to scope's count for the period starting at period (the
	// zero time: no period) and returns the new total.
	Add(ctx context.Context, scope string, period time.Time, s Spent) (Spent, error)
	// Total is scope's count for the period.
	Total(ctx context.Context, scope string, period time.Time) (Spent, error)
}

// ledgerTimeout bounds one call to a Ledger.
const ledgerTimeout = 10 * time.Second

// BudgetError is the error of a spent budget (errors.Is
// ErrBudgetExceeded).
type BudgetError struct {
	Scope  string // what the budget is for: "agent", "tenant acme"
	Budget Budget
	Spent  Spent
	// Reason says which limit was reached.
	Reason string
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%s budget exceeded: %s", e.Scope, e.Reason)
}

func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// Meter counts the usage of one scope (an agent, a tenant) against its
// budget, and against its parent's (a tenant's meter for its agents).
// Safe for concurrent use. Requests in flight when a budget is reached
// are charged when they end: a budget can be overrun by what those
// requests cost, never by a request that started after it was spent.
type Meter struct {
	scope  string
	prices Prices
	parent *Meter
	period time.Duration
	now    func() time.Time

	slots chan struct{} // admitted requests in flight (Admit)

	ledger Ledger

	mu       sync.Mutex
	budget   Budget
	spent    Spent
	pending  map[time.Time]Spent // charged here, not yet added to the ledger, by period start
	start    time.Time           // of the current period
	flushing chan struct{}       // a background sync is under way (charge); closed when it ends
}

// MinLedgerPeriod is the shortest period of a meter with a ledger.
const MinLedgerPeriod = time.Minute

// MeterOptions configure a Meter.
type MeterOptions struct {
	// Scope names the budget in errors ("agent", "tenant acme").
	Scope  string
	Prices Prices
	Budget Budget
	// Parent is charged too, and its budget checked too.
	Parent *Meter
	// Period, when set, starts the count afresh every Period, counted in
	// UTC from time.Time's zero (year 1): a day starts at midnight UTC, a
	// week (168h) on Monday.
	Period time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
	// Ledger, when set, keeps the count, shared under Scope with other
	// processes' meters of the same scope: each charge is added there in
	// the background (kept and added later when the ledger fails: Flush
	// before the process exits), and each admission reads the shared
	// total (and fails with ErrLedger when it cannot).
	Ledger Ledger
}

// NewMeter returns a meter.
func NewMeter(o MeterOptions) (*Meter, error) {
	if err := o.Budget.Validate(); err != nil {
		return nil, err
	}
	if err := o.Prices.Validate(); err != nil {
		return nil, err
	}
	if o.Period < 0 {
		return nil, fmt.Errorf("meter: negative period %v", o.Period)
	}
	if o.Ledger != nil && o.Period > 0 && o.Period < MinLedgerPeriod {
		// A shared count keeps a row per scope per period.
		return nil, fmt.Errorf("meter: period %v with a ledger: want %v or more", o.Period, MinLedgerPeriod)
	}
	m := &Meter{scope: o.Scope, prices: o.Prices, parent: o.Parent, period: o.Period, now: o.Now, budget: o.Budget,
		slots: make(chan struct{}, MaxInFlight), ledger: o.Ledger}
	if m.now == nil {
		m.now = time.Now
	}
	if m.scope == "" {
		m.scope = "agent"
	}
	m.start = m.periodStart()
	return m, nil
}

func (m *Meter) periodStart() time.Time {
	if m.period == 0 {
		return time.Time{}
	}
	return m.now().UTC().Truncate(m.period)
}

// roll starts a new period when the current one is over. m.mu held.
// What the ledger has not taken of the period that ended stays pending,
// for that period.
func (m *Meter) roll() {
	if m.period == 0 {
		return
	}
	if s := m.periodStart(); s.After(m.start) {
		m.start, m.spent = s, Spent{}
	}
}

// maxPendingPeriods bounds the periods whose charges wait for a ledger
// that stays down (the oldest are dropped).
const maxPendingPeriods = 16

// addPending keeps d for the period starting at start. m.mu held.
func (m *Meter) addPending(start time.Time, d Spent) {
	if m.pending == nil {
		m.pending = map[time.Time]Spent{}
	}
	m.pending[start] = m.pending[start].Add(d)
	if len(m.pending) > maxPendingPeriods {
		delete(m.pending, slices.MinFunc(slices.Collect(maps.Keys(m.pending)), time.Time.Compare))
	}
}

// Charge counts one request's usage of model, here and in the parents.
// A model the answer did not name ("": the client left first, the body
// was neither JSON nor SSE) is charged at the table's highest prices:
// never less than it cost, and no unpriced tokens that would close a
// dollar budget for good.
func (m *Meter) Charge(model string, u Usage) {
	for x := m; x != nil; x = x.parent {
		d := Spent{Usage: u, Requests: 1}
		p, ok := x.prices.Lookup(model)
		if model == "" {
			p, ok = x.prices.highest()
		}
		if ok {
			d.CostUSD = p.Cost(u)
		} else {
			d.UnpricedTokens = u.Tokens()
		}
		x.charge(d)
	}
}

func (m *Meter) charge(d Spent) {
	m.mu.Lock()
	m.roll()
	m.spent = m.spent.Add(d)
	if m.ledger == nil {
		m.mu.Unlock()
		return
	}
	m.addPending(m.start, d)
	// The ledger is written in the background: a charge is made as a
	// response ends, and a slow database must not hold the response.
	// The next admission syncs anyway; Flush waits for it.
	if m.flushing == nil {
		m.flushing = make(chan struct{})
		go m.flushPending()
	}
	m.mu.Unlock()
}

// flushPending syncs until nothing is pending, or a sync fails (the next
// admission or charge tries again).
func (m *Meter) flushPending() {
	for {
		err := m.sync(context.Background())
		m.mu.Lock()
		if err != nil || len(m.pending) == 0 {
			close(m.flushing)
			m.flushing = nil
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

// Flush returns once nothing charged waits to reach the ledger (the
// background writes done, what is left added); an error when the ledger
// cannot take it. Charges that keep coming keep it waiting until ctx
// ends. A meter without a ledger has nothing to flush.
func (m *Meter) Flush(ctx context.Context) error {
	if m.ledger == nil {
		return nil
	}
	for {
		m.mu.Lock()
		done, empty := m.flushing, len(m.pending) == 0
		m.mu.Unlock()
		switch {
		case done != nil:
			select {
			case <-done:
			case <-ctx.Done():
				return ctx.Err()
			}
		case empty:
			return nil
		default:
			if err := m.sync(ctx); err != nil {
				return err
			}
		}
	}
}

// sync adds what is pending to the ledger (earlier periods' charges to
// their periods) and takes the current period's total as the count; on
// failure what was not added waits for the next sync.
func (m *Meter) sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ledgerTimeout)
	defer cancel()
	for {
		m.mu.Lock()
		m.roll()
		batch, start := m.pending, m.start
		m.pending = nil
		m.mu.Unlock()
		// The current period first: its count is what admissions need.
		var total Spent
		var err error
		if p, ok := batch[start]; ok {
			if total, err = m.ledger.Add(ctx, m.scope, start, p); err == nil {
				delete(batch, start)
			}
		} else {
			total, err = m.ledger.Total(ctx, m.scope, start)
		}
		if err == nil {
			// Earlier periods' late charges: a failure keeps them for
			// the next sync and fails nothing now.
			for s, p := range batch {
				if !s.Equal(start) {
					if _, e := m.ledger.Add(ctx, m.scope, s, p); e != nil {
						break
					}
					delete(batch, s)
				}
			}
		}
		m.mu.Lock()
		for s, p := range batch {
			m.addPending(s, p)
		}
		if err != nil {
			m.mu.Unlock()
			return fmt.Errorf("meter %s: %w: %w", m.scope, ErrLedger, err)
		}
		if !start.Equal(m.start) {
			// The period ended meanwhile: read the new one's count.
			m.mu.Unlock()
			continue
		}
		// Charges made meanwhile are pending still: counted on top. Syncs
		// can answer out of order, and the count only grows within a
		// period: an older total must not lower it.
		m.spent = m.spent.max(total.Add(m.pending[start]))
		m.mu.Unlock()
		return nil
	}
}

// Allow returns a *BudgetError when this meter's budget, or a parent's, is
// spent: the next model request must not be forwarded.
func (m *Meter) Allow() error {
	for x := m; x != nil; x = x.parent {
		if err := x.allow(); err != nil {
			return err
		}
	}
	return nil
}

func (m *Meter) allow() error {
	if m.ledger != nil {
		if err := m.sync(context.Background()); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roll()
	b, s := m.budget, m.spent
	var reason string
	switch {
	case b.Tokens > 0 && s.Usage.Tokens() >= b.Tokens:
		reason = fmt.Sprintf("%d of %d tokens used", s.Usage.Tokens(), b.Tokens)
	case b.USD > 0 && s.CostUSD >= b.USD:
		reason = fmt.Sprintf("$%.6g of $%.6g spent", s.CostUSD, b.USD)
	case b.USD > 0 && s.UnpricedTokens > 0:
		// A dollar budget cannot be kept with costs it cannot see.
		reason = fmt.Sprintf("%d tokens of a model with no price: the dollar budget cannot be kept (add the model to the prices)", s.UnpricedTokens)
	default:
		return nil
	}
	return &BudgetError{Scope: m.scope, Budget: b, Spent: s, Reason: reason}
}

// SetBudget replaces the budget (raise it and the next request goes
// through).
func (m *Meter) SetBudget(b Budget) error {
	if err := b.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.budget = b
	return nil
}

// Budget returns the budget.
func (m *Meter) Budget() Budget {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.budget
}

// Spent returns what was counted (in the current period): with a
// Ledger, the shared total when it can be read, else what this meter
// knows.
func (m *Meter) Spent() Spent {
	if m.ledger != nil {
		_ = m.sync(context.Background())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roll()
	return m.spent
}

// Cost is what u of model costs at the meter's prices; false when the
// model has none.
func (m *Meter) Cost(model string, u Usage) (float64, bool) {
	p, ok := m.prices.Lookup(model)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

// MaxInFlight bounds the requests one meter admits at once while a budget
// is set (its own or a parent's): a request's usage is known only when it
// ends, so a budget can be overrun by at most what this many requests
// cost, not by any number started together.
const MaxInFlight = 8

// Admit is Allow for a request about to be forwarded: while a budget is
// set it waits (until ctx ends) for one of MaxInFlight slots, then checks
// the budget again, since the requests it waited for may have spent it.
// release, never nil, frees the slot once the request's usage is charged.
func (m *Meter) Admit(ctx context.Context) (release func(), err error) {
	if err := m.Allow(); err != nil {
		return func() {}, err
	}
	if !m.budgeted() {
		return func() {}, nil
	}
	select {
	case m.slots <- struct{}{}:
	case <-ctx.Done():
		return func() {}, ctx.Err()
	}
	release = func() { <-m.slots }
	if err := m.Allow(); err != nil {
		release()
		return func() {}, err
	}
	return release, nil
}

// budgeted reports whether m or a parent has a budget.
func (m *Meter) budgeted() bool {
	for x := m; x != nil; x = x.parent {
		if !x.Budget().Zero() {
			return true
		}
	}
	return false
}

// Tenants gives each tenant one meter, all with the same budget, period
// and prices (a server's per-tenant budget), their counts in the Ledger
// when one is set (shared by the server's replicas). Safe for concurrent
// use.
type Tenants struct {
	opts MeterOptions
	mu   sync.Mutex
	m    map[string]*Meter
}

// NewTenants checks o (its Scope and Parent are ignored: each tenant's
// meter is scoped "tenant NAME").
func NewTenants(o MeterOptions) (*Tenants, error) {
	o.Parent = nil
	if _, err := NewMeter(o); err != nil {
		return nil, err
	}
	return &Tenants{opts: o, m: map[string]*Meter{}}, nil
}

// Meter is tenant's meter, made on first use.
func (t *Tenants) Meter(tenant string) *Meter {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m, ok := t.m[tenant]; ok {
		return m
	}
	o := t.opts
	o.Scope = "tenant " + tenant
	m, _ := NewMeter(o) // o was checked by NewTenants
	t.m[tenant] = m
	return m
}

// Budget is every tenant's budget.
func (t *Tenants) Budget() Budget { return t.opts.Budget }

// Flush flushes every tenant's meter (Meter.Flush): call it before the
// process exits, so that no charge is lost.
func (t *Tenants) Flush(ctx context.Context) error {
	t.mu.Lock()
	ms := make([]*Meter, 0, len(t.m))
	for _, m := range t.m {
		ms = append(ms, m)
	}
	t.mu.Unlock()
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms { // at once: one slow tenant must not use up the others' time
		wg.Go(func() { errs[i] = m.Flush(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
