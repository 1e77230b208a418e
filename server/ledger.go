package server

import (
	"context"
	"math"
	"time"

	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// StoreLedger keeps meters' counts in st (metering.Ledger): replicas on
// one database share each tenant's budget. Dollars are stored in
// billionths.
func StoreLedger(st store.Store) metering.Ledger { return storeLedger{st} }

type storeLedger struct{ st store.Store }

func (l storeLedger) Add(ctx context.Context, scope string, period time.Time, s metering.Spent) (metering.Spent, error) {
	out, err := l.st.AddSpend(ctx, store.Spend{Scope: scope, Period: period,
		InputTokens: s.Usage.InputTokens, OutputTokens: s.Usage.OutputTokens,
		CacheReadTokens: s.Usage.CacheReadTokens, CacheWriteTokens: s.Usage.CacheWriteTokens,
		UnpricedTokens: s.UnpricedTokens, Requests: s.Requests, CostNanoUSD: nanoUSD(s.CostUSD)})
	return spentOf(out), err
}

func (l storeLedger) Total(ctx context.Context, scope string, period time.Time) (metering.Spent, error) {
	out, err := l.st.GetSpend(ctx, scope, period)
	return spentOf(out), err
}

func spentOf(s store.Spend) metering.Spent {
	return metering.Spent{
		Usage: metering.Usage{InputTokens: s.InputTokens, OutputTokens: s.OutputTokens,
			CacheReadTokens: s.CacheReadTokens, CacheWriteTokens: s.CacheWriteTokens},
		CostUSD: float64(s.CostNanoUSD) / 1e9, UnpricedTokens: s.UnpricedTokens, Requests: s.Requests,
	}
}

// nanoUSD rounds dollars to billionths, within int64.
func nanoUSD(usd float64) int64 {
	n := math.Round(usd * 1e9)
	switch {
	case !(n > 0): // NaN and negatives too
		return 0
	case n >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(n)
}
