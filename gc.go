package sandboxagent

import (
	"context"

	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
)

// sweepLeftoverSockets removes, once per process and in the background,
// the socket folders of owners that died and whose sandboxes removed
// themselves (package gc does the same). A folder whose container rt cannot rule
// out is kept.
func sweepLeftoverSockets(rt Runtime) {
	boundary.SweepOnce(func(ctx context.Context, name string) bool {
		list, err := rt.List(ctx, map[string]string{LabelManaged: "true", labels.Sockets: name})
		return err != nil || len(list) > 0
	})
}
