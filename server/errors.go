package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/config"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/repo"
)

// Kinds of error, the "kind" of every JSON error body. A public interface:
// clients branch on them.
const (
	KindInvalidArgument = "invalid_argument"
	KindUnauthorized    = "unauthorized"
	KindForbidden       = "forbidden"
	// KindLost: the agent's sandbox is gone (the server restarted and
	// found it removed or stopped); only DELETE is left.
	KindLost = "lost"
	// KindConflict: an Idempotency-Key reused for another request, or
	// still in use by one in progress; a checkpoint an agent runs on.
	KindConflict          = "conflict"
	KindNotFound          = "not_found"
	KindBusy              = "busy"
	KindTooLarge          = "too_large"
	KindDriverError       = "driver_error"
	KindUnsafeArchive     = "unsafe_archive"
	KindLimit             = "limit"
	KindUnsupported       = "unsupported"
	KindEngineUnavailable = "engine_unavailable"
	KindTimeout           = "timeout"
	KindOutputLimit       = "output_limit"
	KindInterrupted       = "interrupted"
	// KindBudgetExceeded: the agent's or the tenant's budget is spent;
	// the model proxy refused the turn's request (status 402).
	KindBudgetExceeded = "budget_exceeded"
	// KindCheckpointTooLarge: the sandbox is larger than a checkpoint may
	// be (checkpoint_max_bytes); none was made (status 422).
	KindCheckpointTooLarge = "checkpoint_too_large"
	KindInternal           = "internal"
)

// apiError is an error with the status and kind it answers with.
type apiError struct {
	status int
	kind   string
	msg    string
	// retryAfter, in seconds, is sent as Retry-After (with 429 and 503).
	retryAfter int
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, kind: KindInvalidArgument, msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *apiError {
	return &apiError{status: http.StatusNotFound, kind: KindNotFound, msg: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error    string      `json:"error"`
	Kind     string      `json:"kind"`
	Driver   string      `json:"driver,omitempty"`
	ExitCode *int        `json:"exit_code,omitempty"`
	Status   int         `json:"status,omitempty"` // the model API's HTTP status, for a driver_error
	Turn     *turnResult `json:"turn,omitempty"`
}

// limited is a 429: a limit is reached, try again in a few seconds.
func limited(format string, args ...any) *apiError {
	return &apiError{status: http.StatusTooManyRequests, kind: KindLimit, msg: fmt.Sprintf(format, args...), retryAfter: 5}
}

// classify maps a library error to its status and body.
func classify(err error) (int, errorBody) {
	body := errorBody{Error: err.Error()}
	var ae *apiError
	var de *sandboxagent.DriverError
	var ce *config.Error
	var re *sandboxagent.ResourceError
	var mbe *http.MaxBytesError
	status := http.StatusInternalServerError
	switch {
	case errors.As(err, &ae):
		status, body.Kind = ae.status, ae.kind
	case errors.As(err, &mbe):
		status, body.Kind = http.StatusRequestEntityTooLarge, KindTooLarge
	case errors.Is(err, sandboxagent.ErrCheckpointSize):
		// Before too_large: an archive over the limit wraps the
		// download's limit too.
		status, body.Kind = http.StatusUnprocessableEntity, KindCheckpointTooLarge
	case errors.Is(err, repo.ErrBranchExists):
		status, body.Kind = http.StatusConflict, KindConflict
	case errors.Is(err, repo.ErrUnsafe):
		// A bundle a request uploaded, or the agent's changes, refused.
		status, body.Kind = http.StatusUnprocessableEntity, KindUnsafeArchive
	case errors.Is(err, repo.ErrNotRepository), errors.Is(err, repo.ErrOutside):
		status, body.Kind = http.StatusBadRequest, KindInvalidArgument
	case errors.Is(err, repo.ErrNoGit):
		// git missing in the sandbox's image (or on the server's host),
		// as a CLI missing there is.
		status, body.Kind = http.StatusUnprocessableEntity, KindDriverError
	case errors.Is(err, checkpoint.ErrInUse):
		status, body.Kind = http.StatusConflict, KindConflict
	case errors.Is(err, checkpoint.ErrNotFound):
		status, body.Kind = http.StatusNotFound, KindNotFound
	case errors.Is(err, metering.ErrBudgetExceeded):
		// Before driver_error: the CLI reported the refusal too.
		status, body.Kind = http.StatusPaymentRequired, KindBudgetExceeded
	case errors.Is(err, sandboxagent.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		status, body.Kind = http.StatusGatewayTimeout, KindTimeout
	case errors.As(err, &de):
		status, body.Kind = http.StatusUnprocessableEntity, KindDriverError
		body.Driver, body.Status = de.Driver, de.Status
		code := de.ExitCode
		body.ExitCode = &code
	case errors.As(err, &re), errors.Is(err, sandboxagent.ErrCLIMissing), errors.Is(err, sandboxagent.ErrCLIExited):
		status, body.Kind = http.StatusUnprocessableEntity, KindDriverError
	case errors.As(err, &ce), errors.Is(err, sandboxagent.ErrInvalidArgument):
		status, body.Kind = http.StatusBadRequest, KindInvalidArgument
	case errors.Is(err, sandboxagent.ErrPathNotFound), errors.Is(err, sandboxagent.ErrImageNotFound):
		status, body.Kind = http.StatusNotFound, KindNotFound
	case errors.Is(err, sandboxagent.ErrUnsupported), errors.Is(err, sandboxagent.ErrUnsupportedByRuntime):
		status, body.Kind = http.StatusNotImplemented, KindUnsupported
	case errors.Is(err, sandboxagent.ErrOutputLimit):
		// The sandbox's CLI output passed a max_turn_*/max_audit_* bound.
		status, body.Kind = http.StatusUnprocessableEntity, KindOutputLimit
	case errors.Is(err, sandboxagent.ErrLimitExceeded):
		// A download over max_download_* (the request was fine).
		status, body.Kind = http.StatusUnprocessableEntity, KindTooLarge
	case errors.Is(err, sandboxagent.ErrUnsafeArchive):
		status, body.Kind = http.StatusUnprocessableEntity, KindUnsafeArchive
	case errors.Is(err, sandboxagent.ErrEngineUnavailable):
		status, body.Kind = http.StatusServiceUnavailable, KindEngineUnavailable
	case errors.Is(err, context.Canceled):
		// The client went away, the agent was deleted or the server is
		// shutting down.
		status, body.Kind = http.StatusServiceUnavailable, KindInterrupted
	default:
		body.Kind = KindInternal
	}
	return status, body
}

func writeError(w http.ResponseWriter, err error) {
	status, body := classify(err)
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(ae.retryAfter))
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
