package trajectory

import (
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/metering"
)

// The Checker backs what the record holds and says what is missing for
// the rest; a CLI's own call id is mapped to the model's for the result.
func TestChecker(t *testing.T) {
	var r Record
	exchange(&r, toolsReq, 200, callEvents("c1", "ls /tmp")...)
	exchange(&r, resultReq("c1", "a.txt"), 200)
	c := &Checker{Rec: &r}
	for _, tc := range []struct {
		name    string
		check   func() (bool, string)
		ok      bool
		missing string
	}{
		{"the model's call", func() (bool, string) { return c.ToolCall("c1", "", "", nil) }, true, ""},
		{"a call under the CLI's own id, by command", func() (bool, string) { return c.ToolCall("item_7", "ls /tmp", "bash", nil) }, true, ""},
		{"its result under the CLI's id", func() (bool, string) { return c.ToolResult("item_7", "a.txt") }, true, ""},
		{"a forged call", func() (bool, string) { return c.ToolCall("c9", "rm -rf /", "bash", nil) }, false, "never asked for"},
		{"a forged result", func() (bool, string) { return c.ToolResult("c1", "something else") }, false, "differs"},
		{"a result without an id", func() (bool, string) { return c.ToolResult("", "x") }, false, "without a call id"},
		{"text never sent", func() (bool, string) { return c.Text("forged", false) }, false, "never sent"},
		{"reasoning never sent", func() (bool, string) { return c.Text("forged", true) }, false, "reasoning"},
	} {
		ok, why := tc.check()
		if ok != tc.ok || !strings.Contains(why, tc.missing) {
			t.Errorf("%s: %v %q, want %v %q", tc.name, ok, why, tc.ok, tc.missing)
		}
	}
	// Past MaxChecks nothing is checked: a flood buys no work.
	c.checks = MaxChecks
	if !c.Exhausted() {
		t.Error("not exhausted at MaxChecks")
	}
	if ok, why := c.ToolCall("c1", "", "", nil); ok || !strings.Contains(why, "not checked") {
		t.Errorf("past MaxChecks: %v %q", ok, why)
	}
}

// The CLI's usage reports add up (a session total replaces them and is
// not compared); the comparison flags any difference in input or output.
func TestCLIUsage(t *testing.T) {
	u := func(in, out int64) metering.Usage { return metering.Usage{InputTokens: in, OutputTokens: out} }
	for _, tc := range []struct {
		name    string
		reports []metering.Usage
		cumul   []bool
		proxy   metering.Usage
		want    *metering.Usage
		differs bool
	}{
		{"none", nil, nil, u(10, 2), nil, false},
		{"summed, equal", []metering.Usage{u(6, 1), u(4, 1)}, []bool{false, false}, u(10, 2), &metering.Usage{InputTokens: 10, OutputTokens: 2}, false},
		{"under-reported", []metering.Usage{u(6, 1)}, []bool{false}, u(10, 2), &metering.Usage{InputTokens: 6, OutputTokens: 1}, true},
		{"input without the cache (claude's)", []metering.Usage{{InputTokens: 4, OutputTokens: 2, CacheReadTokens: 5, CacheWriteTokens: 1}}, []bool{false}, metering.Usage{InputTokens: 10, OutputTokens: 2, CacheReadTokens: 5, CacheWriteTokens: 1}, &metering.Usage{InputTokens: 4, OutputTokens: 2, CacheReadTokens: 5, CacheWriteTokens: 1}, false},
		{"session totals", []metering.Usage{u(50, 9), u(60, 11)}, []bool{true, true}, u(10, 2), &metering.Usage{InputTokens: 60, OutputTokens: 11}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v Verification
			for i, r := range tc.reports {
				v.AddCLIUsage(r, tc.cumul[i])
			}
			v.CompareUsage(tc.proxy)
			if (v.CLIUsage == nil) != (tc.want == nil) || v.CLIUsage != nil && *v.CLIUsage != *tc.want || v.UsageDiffers != tc.differs {
				t.Errorf("CLIUsage %+v differs %v, want %+v %v", v.CLIUsage, v.UsageDiffers, tc.want, tc.differs)
			}
		})
	}
}
