package sandboxagent

import (
	"context"
	"sync/atomic"
	"time"
)

// execWaitKey carries an exec's queue-wait total in its context.
type execWaitKey struct{}

// WithExecQueueWait returns ctx carrying a total of the time a Runtime's
// Exec under it waited for admission to the engine (an exec gate such as
// runtime/execlimit's), and the func reading that total. Sandbox.Run uses
// it to report ExecResult.QueueWait apart from the exec's own time.
func WithExecQueueWait(ctx context.Context) (context.Context, func() time.Duration) {
	total := new(atomic.Int64)
	return context.WithValue(ctx, execWaitKey{}, total), func() time.Duration { return time.Duration(total.Load()) }
}

// AddExecQueueWait adds d to the queue-wait total ctx carries (none: a
// no-op). A Runtime that queues execs calls it with each wait.
func AddExecQueueWait(ctx context.Context, d time.Duration) {
	if total, ok := ctx.Value(execWaitKey{}).(*atomic.Int64); ok {
		total.Add(int64(d))
	}
}
