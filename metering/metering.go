// Package metering counts what model requests cost: token usage in one
// shape for every wire API, and a price table that turns it into US
// dollars. The model proxy measures usage on the host, from the
// upstream's responses, so a CLI inside a sandbox cannot under-report it.
package metering

import (
	"fmt"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"math"
	"sort"
	"strings"
)

// Usage is the token usage of one model request, or a sum of them.
// InputTokens counts every input token; CacheReadTokens and
// CacheWriteTokens are the part of them read from, and written to, the
// upstream's prompt cache.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Add returns u plus v; a count stops at the largest int64 (a hostile
// upstream's counts must not wrap a budget's total below its limit).
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:      sat(u.InputTokens, v.InputTokens),
		OutputTokens:     sat(u.OutputTokens, v.OutputTokens),
		CacheReadTokens:  sat(u.CacheReadTokens, v.CacheReadTokens),
		CacheWriteTokens: sat(u.CacheWriteTokens, v.CacheWriteTokens),
	}
}

// Tokens is the total a token budget counts: input and output.
func (u Usage) Tokens() int64 { return sat(u.InputTokens, u.OutputTokens) }

// sat adds two counts, negative ones as zero, stopping at the largest
// int64.
func sat(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Price is what a model costs, in US dollars per million tokens: input
// (not from the cache), output, input read from the prompt cache, and
// input written to it.
type Price struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cache_read,omitempty"`
	CacheWrite float64 `json:"cache_write,omitempty"`
}

// Cost is what u costs at p, in US dollars.
func (p Price) Cost(u Usage) float64 {
	uncached := max(u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens, 0)
	return (float64(uncached)*p.Input + float64(u.OutputTokens)*p.Output +
		float64(u.CacheReadTokens)*p.CacheRead + float64(u.CacheWriteTokens)*p.CacheWrite) / 1e6
}

func (p Price) valid() bool {
	for _, v := range []float64{p.Input, p.Output, p.CacheRead, p.CacheWrite} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// Prices maps model names to prices. A name matches a model of the same
// name, or a dated snapshot of it ("claude-sonnet-4-5-20250929" or
// "gpt-5.5-2026-04-23" match "claude-sonnet-4-5" and "gpt-5.5"); any other
// continuation is another model ("gpt-5.5-pro" is not "gpt-5.5") and
// has no price unless it is listed.
type Prices map[string]Price

// datedSuffix is what a dated snapshot adds to its model's name.
var datedSuffix = lazyre.New(`^-(\d{8}|\d{4}-\d{2}-\d{2})$`)

// Lookup finds the price of model.
func (ps Prices) Lookup(model string) (Price, bool) {
	p, ok := ps[ps.Name(model)]
	return p, ok
}

// Name is the table's name for model: itself, or the model a dated
// snapshot is of ("": not priced).
func (ps Prices) Name(model string) string {
	if _, ok := ps[model]; ok {
		return model
	}
	for name := range ps {
		if rest, ok := strings.CutPrefix(model, name); ok && datedSuffix.MatchString(rest) {
			return name
		}
	}
	return ""
}

// highest is the table's highest price of each kind (false: an empty
// table).
func (ps Prices) highest() (Price, bool) {
	var h Price
	for _, p := range ps {
		h = Price{Input: max(h.Input, p.Input), Output: max(h.Output, p.Output), CacheRead: max(h.CacheRead, p.CacheRead), CacheWrite: max(h.CacheWrite, p.CacheWrite)}
	}
	return h, len(ps) > 0
}

// Validate reports a price that is negative or not a number.
func (ps Prices) Validate() error {
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == "" || !ps[n].valid() {
			return fmt.Errorf("price of model %q: names must not be empty and prices must be finite and not negative", n)
		}
	}
	return nil
}

// Merge returns ps with over's entries added or replacing its own.
func (ps Prices) Merge(over Prices) Prices {
	out := make(Prices, len(ps)+len(over))
	for n, p := range ps {
		out[n] = p
	}
	for n, p := range over {
		out[n] = p
	}
	return out
}

// DefaultPrices are list prices of models the drivers use by default, in
// US dollars per million tokens, as published by their vendors (OpenAI's
// and Anthropic's pricing pages, 2026). Vendors change them: override
// them in the configuration ("prices"). A model not listed is counted in
// tokens, its cost unknown.
func DefaultPrices() Prices {
	return Prices{
		// codex's and pi's default.
		"gpt-5.5": {Input: 5, Output: 30, CacheRead: 0.5},
		"gpt-5.4": {Input: 2.5, Output: 15, CacheRead: 0.25},
		// claude's "sonnet" resolves to a dated snapshot of these.
		"claude-sonnet-4-5": {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
		"claude-sonnet-4":   {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
	}
}
