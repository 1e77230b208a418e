package metering

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMeterBudgets(t *testing.T) {
	prices := Prices{"m": {Input: 1, Output: 2}}
	for _, tc := range []struct {
		name    string
		budget  Budget
		model   string
		charges int
		want    string // "" = allowed after the charges
	}{
		{"no budget", Budget{}, "m", 5, ""},
		{"tokens left", Budget{Tokens: 100}, "m", 3, ""}, // 3 × 30 = 90
		{"tokens spent", Budget{Tokens: 90}, "m", 3, "90 of 90 tokens"},
		{"dollars left", Budget{USD: 1}, "m", 1, ""},
		{"dollars spent", Budget{USD: 0.00005}, "m", 2, "$0.0001 of $5e-05 spent"},
		{"dollars, model without price", Budget{USD: 100}, "other", 1, "no price"},
		{"tokens, model without price", Budget{Tokens: 100}, "other", 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMeter(MeterOptions{Prices: prices, Budget: tc.budget})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Allow(); err != nil {
				t.Fatalf("refused before any charge: %v", err)
			}
			for range tc.charges {
				m.Charge(tc.model, Usage{InputTokens: 10, OutputTokens: 20})
			}
			err = m.Allow()
			var be *BudgetError
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrBudgetExceeded) || !errors.As(err, &be) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want ErrBudgetExceeded saying %q", err, tc.want)
			case tc.want != "":
				// Raising the budget lets the next request through.
				if err := m.SetBudget(Budget{Tokens: 1 << 40, USD: 1 << 20}); err != nil {
					t.Fatal(err)
				}
				if err := m.Allow(); err != nil && !strings.Contains(err.Error(), "no price") {
					t.Errorf("after raising: %v", err)
				}
			}
		})
	}
}

func TestMeterParent(t *testing.T) {
	tenant, _ := NewMeter(MeterOptions{Scope: "tenant acme", Budget: Budget{Tokens: 50}})
	a, _ := NewMeter(MeterOptions{Parent: tenant})
	b, _ := NewMeter(MeterOptions{Parent: tenant})
	a.Charge("m", Usage{InputTokens: 30, OutputTokens: 20})
	if err := b.Allow(); !errors.Is(err, ErrBudgetExceeded) || !strings.Contains(err.Error(), "tenant acme") {
		t.Fatalf("another agent of the tenant: %v, want the tenant's budget", err)
	}
	if s := b.Spent(); s.Requests != 0 {
		t.Errorf("b charged: %+v", s)
	}
	if s := tenant.Spent(); s.Usage.Tokens() != 50 || s.Requests != 1 {
		t.Errorf("tenant %+v", s)
	}
}

func TestMeterPeriod(t *testing.T) {
	now := time.Date(2026, 12, 2, 23, 59, 0, 0, time.UTC)
	m, _ := NewMeter(MeterOptions{Budget: Budget{Tokens: 10}, Period: 24 * time.Hour, Now: func() time.Time { return now }})
	m.Charge("m", Usage{InputTokens: 10})
	if err := m.Allow(); err == nil {
		t.Fatal("spent budget allowed")
	}
	now = now.Add(2 * time.Minute) // the next UTC day
	if err := m.Allow(); err != nil {
		t.Fatalf("a new day: %v", err)
	}
}

func TestMeterRejects(t *testing.T) {
	for _, o := range []MeterOptions{{Budget: Budget{Tokens: -1}}, {Budget: Budget{USD: -1}}, {Period: -time.Second}, {Period: time.Second, Ledger: &memLedger{}}, {Prices: Prices{"m": {Input: -1}}}} {
		if _, err := NewMeter(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestMeterConcurrent(t *testing.T) {
	tenant, _ := NewMeter(MeterOptions{})
	m, _ := NewMeter(MeterOptions{Parent: tenant, Budget: Budget{Tokens: 1 << 40}})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				m.Charge("m", Usage{InputTokens: 1})
				_ = m.Allow()
			}
		})
	}
	wg.Wait()
	if s := tenant.Spent(); s.Usage.InputTokens != 8000 || s.Requests != 8000 {
		t.Errorf("tenant %+v", s)
	}
}

// With a budget set, at most MaxInFlight requests are admitted at once;
// the next waits for a slot and is checked against the budget again.
func TestMeterAdmit(t *testing.T) {
	m, _ := NewMeter(MeterOptions{Budget: Budget{Tokens: 100}})
	var releases []func()
	for range MaxInFlight {
		rel, err := m.Admit(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, rel)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := m.Admit(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request past MaxInFlight: %v, want it to wait", err)
	}
	got := make(chan error, 1)
	go func() { _, err := m.Admit(context.Background()); got <- err }()
	m.Charge("m", Usage{InputTokens: 100}) // one of those in flight spent the budget
	releases[0]()
	if err := <-got; !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("admitted after the budget was spent: %v", err)
	}
	// Without a budget nothing waits.
	free, _ := NewMeter(MeterOptions{})
	for range 3 * MaxInFlight {
		if _, err := free.Admit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// memLedger is a Ledger in memory, shared by the meters of a test as a
// database is by replicas; fail makes its calls fail.
type memLedger struct {
	mu     sync.Mutex
	counts map[string]Spent
	fail   bool
	adds   int
}

func (l *memLedger) key(scope string, period time.Time) string { return scope + "@" + period.String() }

func (l *memLedger) Add(_ context.Context, scope string, period time.Time, s Spent) (Spent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return Spent{}, errors.New("database down")
	}
	l.adds++
	if l.counts == nil {
		l.counts = map[string]Spent{}
	}
	k := l.key(scope, period)
	l.counts[k] = l.counts[k].Add(s)
	return l.counts[k], nil
}

func (l *memLedger) Total(_ context.Context, scope string, period time.Time) (Spent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return Spent{}, errors.New("database down")
	}
	return l.counts[l.key(scope, period)], nil
}

func (l *memLedger) setFail(v bool) { l.mu.Lock(); l.fail = v; l.mu.Unlock() }

// Two meters of one scope on one ledger (two replicas, one tenant): what
// one charges, the other's budget sees; a ledger that fails keeps the
// charges pending (added once it works again) and fails admissions with
// ErrLedger; a new period counts afresh.
func TestMeterLedger(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l := &memLedger{}
	opts := MeterOptions{Scope: "tenant acme", Budget: Budget{Tokens: 100}, Period: 24 * time.Hour, Now: clock, Ledger: l}
	a, err := NewMeter(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewMeter(opts)
	ctx := context.Background()
	// A charge reaches the ledger in the background; Flush waits for it.
	a.Charge("m", Usage{InputTokens: 40, OutputTokens: 20})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Allow(); err != nil {
		t.Fatalf("60 of 100 spent through the other replica: %v", err)
	}
	if got := b.Spent().Usage.Tokens(); got != 60 {
		t.Errorf("the other replica counts %d tokens, want 60", got)
	}
	b.Charge("m", Usage{InputTokens: 30})
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Allow(); err != nil {
		t.Fatalf("90 of 100: %v", err)
	}

	l.setFail(true)
	a.Charge("m", Usage{OutputTokens: 10}) // kept pending
	if err := a.Flush(ctx); !errors.Is(err, ErrLedger) {
		t.Fatalf("Flush with the ledger down: %v, want ErrLedger", err)
	}
	if err := a.Allow(); !errors.Is(err, ErrLedger) || errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("ledger down: %v, want ErrLedger", err)
	}
	if _, err := a.Admit(context.Background()); !errors.Is(err, ErrLedger) {
		t.Fatalf("Admit with the ledger down: %v", err)
	}
	l.setFail(false)
	// The pending charge reaches the ledger at a's next sync (its
	// admission): the budget is then spent for both.
	for _, x := range []struct {
		name string
		m    *Meter
	}{{"a", a}, {"b", b}} {
		name, m := x.name, x.m
		var be *BudgetError
		if err := m.Allow(); !errors.As(err, &be) || be.Scope != "tenant acme" || be.Spent.Usage.Tokens() != 100 {
			t.Errorf("replica %s after the ledger is back: %v, want 100 of 100 tokens spent", name, err)
		}
	}

	now = now.Add(24 * time.Hour) // the next day
	if err := b.Allow(); err != nil {
		t.Errorf("a new period: %v", err)
	}
	a.Charge("m", Usage{InputTokens: 5})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.Spent().Usage.Tokens(); got != 5 {
		t.Errorf("the new period counts %d tokens, want 5", got)
	}
}

// A tenant's meter is one per name, shared by every agent meter under it.
func TestTenants(t *testing.T) {
	ts, err := NewTenants(MeterOptions{Budget: Budget{Tokens: 50}})
	if err != nil {
		t.Fatal(err)
	}
	if ts.Meter("acme") != ts.Meter("acme") || ts.Meter("acme") == ts.Meter("other") {
		t.Fatal("one meter per tenant")
	}
	first, _ := NewMeter(MeterOptions{Parent: ts.Meter("acme")})
	second, _ := NewMeter(MeterOptions{Parent: ts.Meter("acme")})
	first.Charge("m", Usage{InputTokens: 50})
	var be *BudgetError
	if err := second.Allow(); !errors.As(err, &be) || be.Scope != "tenant acme" {
		t.Errorf("the second agent of a spent tenant: %v", err)
	}
	if err := ts.Meter("other").Allow(); err != nil {
		t.Errorf("another tenant: %v", err)
	}
	if _, err := NewTenants(MeterOptions{Budget: Budget{Tokens: -1}}); err == nil {
		t.Error("a negative budget accepted")
	}
}

// A charge whose model the answer did not name costs the table's highest
// prices, so a dollar budget stays open (and is not under-charged).
func TestChargeUnnamedModel(t *testing.T) {
	prices := Prices{"cheap": {Input: 1, Output: 2}, "dear": {Input: 10, Output: 5}}
	m, _ := NewMeter(MeterOptions{Prices: prices, Budget: Budget{USD: 1}})
	m.Charge("", Usage{InputTokens: 1000, OutputTokens: 1000}) // $0.01 + $0.005
	s := m.Spent()
	if s.UnpricedTokens != 0 || s.CostUSD < 0.0149 || s.CostUSD > 0.0151 {
		t.Errorf("spent %+v, want $0.015 at the highest prices and nothing unpriced", s)
	}
	if err := m.Allow(); err != nil {
		t.Errorf("the dollar budget closed: %v", err)
	}
	// A named model without a price is still unpriced.
	m.Charge("unknown", Usage{InputTokens: 1})
	if m.Spent().UnpricedTokens != 1 {
		t.Errorf("unknown model: %+v", m.Spent())
	}
}

// A ledger down as a period ends, the period ending during the failed
// call: the new period's count was not read either, so the request is
// refused (ErrLedger), not admitted unchecked against an empty count.
func TestMeterLedgerDownAtPeriodEnd(t *testing.T) {
	now := time.Date(2026, 12, 3, 23, 59, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l := &slowLedger{memLedger: &memLedger{}}
	m, err := NewMeter(MeterOptions{Scope: "tenant acme", Budget: Budget{Tokens: 100}, Period: 24 * time.Hour, Now: clock, Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	m.Charge("m", Usage{InputTokens: 10})
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.setFail(true)
	l.during = func() { // the next day, and another request's charge rolls the meter to it
		mu.Lock()
		now = now.Add(2 * time.Minute)
		mu.Unlock()
		m.mu.Lock()
		m.roll()
		m.mu.Unlock()
	}
	if err := m.Allow(); !errors.Is(err, ErrLedger) {
		t.Fatalf("the period ended during a failed read: %v, want ErrLedger", err)
	}
	l.during = nil
	l.setFail(false)
	if err := m.Allow(); err != nil {
		t.Fatalf("a new period, the ledger back: %v", err)
	}
	if got := m.Spent().Usage.Tokens(); got != 0 {
		t.Errorf("the new period counts %d tokens, want 0", got)
	}
}

// slowLedger runs during inside each call, as if the call took that long.
type slowLedger struct {
	*memLedger
	during func()
}

func (l *slowLedger) Total(ctx context.Context, scope string, period time.Time) (Spent, error) {
	if l.during != nil {
		l.during()
	}
	return l.memLedger.Total(ctx, scope, period)
}

// A charge the ledger could not take before its period ended is added to
// that period when it can, not dropped and not counted in the next.
func TestMeterLedgerLateCharge(t *testing.T) {
	now := time.Date(2026, 12, 3, 23, 59, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l := &memLedger{}
	m, err := NewMeter(MeterOptions{Scope: "tenant acme", Budget: Budget{Tokens: 100}, Period: 24 * time.Hour, Now: clock, Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	day := m.periodStart()
	l.setFail(true)
	m.Charge("m", Usage{InputTokens: 7})
	if err := m.Flush(ctx); !errors.Is(err, ErrLedger) {
		t.Fatalf("Flush with the ledger down: %v", err)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute) // the next day
	mu.Unlock()
	l.setFail(false)
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Total(ctx, "tenant acme", day); got.Usage.Tokens() != 7 {
		t.Errorf("the day that ended has %d tokens in the ledger, want its late charge's 7", got.Usage.Tokens())
	}
	if got := m.Spent().Usage.Tokens(); got != 0 {
		t.Errorf("the new day counts %d tokens, want 0", got)
	}
}

// A sync that succeeds while the period ends reads the new period's
// count before it answers; and an older total answering after a newer
// one does not lower the count.
func TestMeterLedgerOrder(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l := &gateLedger{memLedger: &memLedger{}}
	m, err := NewMeter(MeterOptions{Scope: "tenant acme", Budget: Budget{Tokens: 100}, Period: 24 * time.Hour, Now: clock, Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.Charge("m", Usage{InputTokens: 10})
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A stale read: the total is taken, then answers after a charge of 5
	// reached the ledger.
	hold, taken := make(chan struct{}), make(chan struct{})
	l.set(nil, hold, taken)
	got := make(chan int64)
	go func() { got <- m.Spent().Usage.Tokens() }()
	<-taken
	m.Charge("m", Usage{InputTokens: 5})
	for m.Spent().Usage.Tokens() != 15 { // reads through the ledger, unheld
		time.Sleep(time.Millisecond)
	}
	close(hold)
	if n := <-got; n != 15 {
		t.Errorf("after a stale total answered, the count is %d, want 15", n)
	}

	// Another replica charged 90 in the new day; the day ends during a
	// successful read of the old one's count.
	next := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	if _, err := l.memLedger.Add(ctx, "tenant acme", next, Spent{Usage: Usage{InputTokens: 100}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	l.set(func() {
		mu.Lock()
		now = next.Add(time.Minute)
		mu.Unlock()
		m.mu.Lock()
		m.roll() // another request's charge
		m.mu.Unlock()
	}, nil, nil)
	if err := m.Allow(); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("the new day's 100 of 100 tokens spent elsewhere: %v, want ErrBudgetExceeded", err)
	}
}

// gateLedger: Total can run during, once, and can take its answer and
// then wait for hold (a stale answer arriving late), once.
type gateLedger struct {
	*memLedger
	gmu    sync.Mutex
	during func()
	hold   chan struct{}
	taken  chan struct{}
}

func (l *gateLedger) set(during func(), hold, taken chan struct{}) {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	l.during, l.hold, l.taken = during, hold, taken
}

func (l *gateLedger) Total(ctx context.Context, scope string, period time.Time) (Spent, error) {
	s, err := l.memLedger.Total(ctx, scope, period)
	l.gmu.Lock()
	f, t, hold := l.during, l.taken, l.hold
	l.during, l.taken = nil, nil
	l.gmu.Unlock()
	if f != nil {
		f()
	}
	if t != nil {
		close(t)
		<-hold
	}
	return s, err
}

// A late charge the ledger keeps refusing (its period's write fails) does
// not block the current period: admissions read the current count.
func TestMeterLedgerOldPeriodFailing(t *testing.T) {
	now := time.Date(2026, 12, 3, 23, 59, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	day := now.Truncate(24 * time.Hour)
	l := &refusingLedger{memLedger: &memLedger{}, refuse: day}
	m, err := NewMeter(MeterOptions{Scope: "tenant acme", Budget: Budget{Tokens: 100}, Period: 24 * time.Hour, Now: clock, Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	m.Charge("m", Usage{InputTokens: 7}) // its day's write fails
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if err := m.Allow(); err != nil {
		t.Fatalf("the new day, an old day's charge unwritten: %v", err)
	}
	m.mu.Lock()
	late := m.pending[day]
	m.mu.Unlock()
	if late.Usage.Tokens() != 7 {
		t.Errorf("the old day's charge pending: %+v, want its 7 tokens kept", late)
	}
}

// refusingLedger fails every Add to one period.
type refusingLedger struct {
	*memLedger
	refuse time.Time
}

func (l *refusingLedger) Add(ctx context.Context, scope string, period time.Time, s Spent) (Spent, error) {
	if period.Equal(l.refuse) {
		return Spent{}, errors.New("refused")
	}
	return l.memLedger.Add(ctx, scope, period, s)
}
