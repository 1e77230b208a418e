package metering

import (
	"math"
	"testing"
)

func TestLookup(t *testing.T) {
	ps := Prices{"claude-sonnet-4": {Input: 1}, "claude-sonnet-4-5": {Input: 2}, "gpt-5.5": {Input: 3}}
	for _, tc := range []struct {
		model string
		want  float64
		ok    bool
	}{
		{"gpt-5.5", 3, true},
		{"claude-sonnet-4-5-20250929", 2, true}, // the longest name wins
		{"claude-sonnet-4-20250514", 1, true},
		{"claude-sonnet-45", 0, false}, // continues without "-"
		{"gpt-5.5x", 0, false},
		{"gpt-5.5-pro", 0, false}, // another model, not a snapshot
		{"gpt-5.5-2026-04-23", 3, true},
		{"claude-sonnet-4-5-2025092", 0, false},
		{"", 0, false},
	} {
		p, ok := ps.Lookup(tc.model)
		if ok != tc.ok || p.Input != tc.want {
			t.Errorf("%q: %v %v, want %v %v", tc.model, p.Input, ok, tc.want, tc.ok)
		}
	}
}

func TestCost(t *testing.T) {
	p := Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
	// 2112 input of which 2000 from the cache and 100 written to it: 12
	// uncached.
	u := Usage{InputTokens: 2112, OutputTokens: 42, CacheReadTokens: 2000, CacheWriteTokens: 100}
	want := (12*3 + 42*15 + 2000*0.3 + 100*3.75) / 1e6
	if got := p.Cost(u); math.Abs(got-want) > 1e-12 {
		t.Errorf("cost %v, want %v", got, want)
	}
	// Counts that do not add up never make a negative cost.
	if got := p.Cost(Usage{InputTokens: 1, CacheReadTokens: 10}); got < 0 {
		t.Errorf("negative cost %v", got)
	}
	huge := Usage{InputTokens: math.MaxInt64 - 1, OutputTokens: math.MaxInt64}
	if s := huge.Add(huge); s.InputTokens != math.MaxInt64 || s.Tokens() != math.MaxInt64 {
		t.Errorf("sums wrapped: %+v %d", s, s.Tokens())
	}
	if s := u.Add(u); s.InputTokens != 4224 || s.Tokens() != 4224+84 || s.CacheWriteTokens != 200 {
		t.Errorf("sum %+v", s)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultPrices().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Prices{{"": {}}, {"m": {Input: -1}}, {"m": {Output: math.NaN()}}, {"m": {CacheRead: math.Inf(1)}}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	m := DefaultPrices().Merge(Prices{"gpt-5.5": {Input: 1}, "mine": {Input: 2}})
	if m["gpt-5.5"].Input != 1 || m["mine"].Input != 2 || m["claude-sonnet-4"].Input != 3 {
		t.Errorf("merge %v", m)
	}
}
