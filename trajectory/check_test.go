package trajectory

import (
	"strings"
	"testing"
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
