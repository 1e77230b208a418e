package sandboxagent

import "context"

// DefaultMaxConcurrentStarts is LimitStarts' width when given none (the
// command line's max_concurrent_starts default).
const DefaultMaxConcurrentStarts = 8

// LimitStarts wraps rt so that at most n container creates and starts run
// at once; the others wait their turn (or their context). Many sandboxes
// starting together then queue instead of stampeding the engine. Share
// the returned Runtime between the sandboxes to be bounded together.
func LimitStarts(rt Runtime, n int) Runtime {
	if n <= 0 {
		n = DefaultMaxConcurrentStarts
	}
	return &limitedRuntime{Runtime: rt, slots: make(chan struct{}, n)}
}

type limitedRuntime struct {
	Runtime
	slots chan struct{}
}

func (l *limitedRuntime) acquire(ctx context.Context) error {
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *limitedRuntime) Create(ctx context.Context, spec ContainerSpec) (string, error) {
	if err := l.acquire(ctx); err != nil {
		return "", err
	}
	defer func() { <-l.slots }()
	return l.Runtime.Create(ctx, spec)
}

func (l *limitedRuntime) Start(ctx context.Context, id string) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer func() { <-l.slots }()
	return l.Runtime.Start(ctx, id)
}

// Features passes the wrapped runtime's on (the Sandbox adapts to them).
func (l *limitedRuntime) Features() RuntimeFeatures { return FeaturesOf(l.Runtime) }
