package audit

import (
	"time"

	"github.com/sandbox-agent/sandbox-agent/trajectory"
)

// Status is a session's status.json: what ran in it, turn by turn.
type Status struct {
	SessionID string       `json:"session_id"`
	Driver    string       `json:"driver"`
	Model     string       `json:"model,omitempty"`
	Image     string       `json:"image"`
	Container string       `json:"container"`
	Created   time.Time    `json:"created"`
	Updated   time.Time    `json:"updated"`
	Turns     []TurnStatus `json:"turns"`
}

// TurnStatus is one turn of a Status.
type TurnStatus struct {
	Turn       int       `json:"turn"`
	Prompt     string    `json:"prompt"`
	Started    time.Time `json:"started"`
	DurationMS int64     `json:"duration_ms"`
	ExitCode   int       `json:"exit_code"`
	Reply      string    `json:"reply,omitempty"`
	Error      string    `json:"error,omitempty"`
	Events     int       `json:"events"`
	FirstLine  int       `json:"first_line,omitempty"`
	LastLine   int       `json:"last_line,omitempty"`
	// Verification is the check of the CLI's events against the model
	// proxy's record (absent without a model proxy).
	Verification *trajectory.Verification `json:"verification,omitempty"`
}
