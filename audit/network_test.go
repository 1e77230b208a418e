package audit

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// model.jsonl and egress.jsonl stop growing at their bound and say how
// many records they left out.
func TestNetworkLogBounded(t *testing.T) {
	root := t.TempDir()
	n := &Network{Root: root, Date: time.Now(), Name: "sb", Log: slog.Default(), Max: 10 << 10}
	for i := range 10_000 {
		n.Model(map[string]int{"i": i})
	}
	n.Close()
	b, err := os.ReadFile(filepath.Join(n.Dir(), "model.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 11<<10 {
		t.Errorf("model.jsonl is %d bytes", len(b))
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"dropped":`) {
		t.Errorf("last line %s", last)
	}
}
