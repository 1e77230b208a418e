package sandboxagent

// The turn machinery: one turn runs the driver's command, splits the CLI's
// output into lines, parses them into events, learns the session id, and
// writes the audit trail (events.jsonl, session.jsonl, status.json) as it
// goes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandbox-agent/sandbox-agent/audit"
	"github.com/sandbox-agent/sandbox-agent/internal/bounded"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/trajectory"
)

// sessionState is what the agent knows of one CLI session: where its
// audit folder is, how many raw lines it has, and its status record.
type sessionState struct {
	created time.Time
	lines   int
	status  audit.Status
}

// maxLineBytes bounds one line of CLI output held in memory; a longer
// line is cut (and flagged in a raw event).
const maxLineBytes = 8 << 20

// maxStderrBytes bounds the CLI stderr kept for error reports.
const maxStderrBytes = 1 << 20

// turn is the state of one running turn.
type turn struct {
	a       *Agent
	no      int
	spec    Turn
	fn      func(Event)
	started time.Time
	parser  Parser

	session   string // known session id
	lines     int    // raw lines of this session so far
	firstLine int
	pending   [][]byte // raw lines seen before the session id was known
	events    []Event
	log       *audit.Log
	auditErr  bool

	// Bounds (Config.Limits): what this turn has taken so far, and the
	// limit it passed, after which lines are only counted.
	cancel      context.CancelCauseFunc
	turnLines   int
	eventBytes  int64
	pendingSize int64 // bytes of pending
	auditStart  int64 // the session log's size when this turn opened it
	limitErr    error
	dropped     struct{ lines, bytes int64 }

	// rec is what the model proxy saw of this turn (nil without a proxy);
	// verification is the check of the CLI's events against it.
	rec          *trajectory.Record
	verification *trajectory.Verification
	unbackedEnd  bool               // a long-lived turn ended on the CLI's word alone
	check        trajectory.Checker // the CLI's events against rec

	record *turnRecord // the agent's record of this turn (Turns)
}

func (t *turn) run(ctx context.Context) (TurnResult, error) {
	a := t.a
	ctx, t.cancel = context.WithCancelCause(ctx)
	defer t.cancel(nil)
	if a.proxy != nil {
		t.rec = &trajectory.Record{}
		t.rec.SetSecrets(a.secrets) // the proxy redacts them from what the CLI sees
		t.check.Rec = t.rec
		a.rec.Store(t.rec)
		defer a.rec.Store(nil)
	}
	ll, longLived := a.longLived()
	t.spec.LongLived = longLived // the parser of the mode's vocabulary
	var inv Invocation
	var err error
	if !longLived {
		if inv, err = a.drv.Command(t.spec); err != nil {
			return TurnResult{}, fmt.Errorf("%s: build command: %w", a.drv.Name(), err)
		}
	}
	t.parser = a.drv.NewParser(t.spec)
	if t.spec.SessionID != "" {
		t.setSession(t.spec.SessionID)
	}
	var xres ExecResult
	var xerr error
	if longLived {
		xres, xerr = a.serveTurn(ctx, ll, t)
	} else {
		lines := &bounded.Lines{Max: maxLineBytes, Fn: t.line}
		req := ExecRequest{
			Cmd: inv.Cmd, Env: inv.Env, WorkDir: inv.WorkDir, Stdout: lines,
			Timeout: a.cfg.Timeouts.Ask, MaxOutputBytes: maxStderrBytes, turn: true,
		}
		if inv.Stdin != nil {
			req.Stdin = bytes.NewReader(inv.Stdin)
		}
		xres, xerr = a.sb.Run(ctx, req)
		lines.Flush()
	}
	if a.proxy != nil {
		// The CLI got its last response a moment before the proxy counted
		// it. A request still open after this (a long-lived CLI's own,
		// between turns) counts to no turn, only to the meter.
		a.proxy.Settle(2 * time.Second)
	}
	spent, budget := a.setInTurn(false) // no egress denial or model request joins the turn after this
	t.emitDenied()
	res := TurnResult{ExitCode: xres.ExitCode, Duration: time.Since(t.started)}
	stderr := t.redact(string(xres.Stderr))
	switch {
	case t.limitErr != nil:
		err = fmt.Errorf("%s turn: %w; the CLI's turn was stopped", a.drv.Name(), t.limitErr)
	case xres.TimedOut && ctx.Err() != nil:
		err = fmt.Errorf("%s turn interrupted: %w", a.drv.Name(), ctx.Err())
	case xres.TimedOut:
		err = fmt.Errorf("%s turn: %w after %v (timeout_ask); the CLI's processes were killed", a.drv.Name(), ErrTimeout, a.cfg.Timeouts.Ask)
		if xerr != nil { // a limit hit on the way, say
			err = fmt.Errorf("%w; %w", err, xerr)
		}
	case xerr != nil && !errors.Is(xerr, ErrCLIExited):
		err = fmt.Errorf("%s turn: %w", a.drv.Name(), xerr)
	case (xres.ExitCode == 126 || xres.ExitCode == 127) && t.lines < t.firstLine:
		err = fmt.Errorf("%s: %w (image %s): %s", a.drv.Name(), ErrCLIMissing, a.image, strings.TrimSpace(stderr))
	default:
		out, ferr := t.parser.Finish(xres.ExitCode, xres.Stderr)
		if out.SessionID != "" {
			t.setSession(out.SessionID)
		}
		res.Reply = out.Reply
		if t.rec != nil {
			res.Reply, t.verification = t.verifyTurn(out.Reply)
		}
		var de *DriverError
		switch {
		case errors.As(ferr, &de):
			if de.Driver == "" {
				de.Driver = a.drv.Name()
			}
			de.Stderr = t.redact(de.Stderr)
			if de.Stderr == "" {
				de.Stderr = stderr
			}
			de.Message = t.redact(de.Message)
			if de.Err == nil && errors.Is(xerr, ErrCLIExited) {
				de.Err = ErrCLIExited
			}
			err = de
		case ferr != nil:
			err = ferr
		case xerr != nil:
			// A long-lived CLI that died before the turn's end, which its
			// output did not explain.
			err = fmt.Errorf("%s turn: %w", a.drv.Name(), xerr)
		case t.lines < t.firstLine && out.Reply == "":
			err = &DriverError{Driver: a.drv.Name(), Message: ErrNoOutput.Error(), ExitCode: xres.ExitCode, Stderr: stderr, Err: ErrNoOutput}
		}
	}
	if budget != "" {
		// The proxy refused a request for the budget: that is the turn's
		// outcome, whatever the CLI made of the refusal.
		berr := a.meter.Allow()
		if berr == nil { // raised meanwhile
			berr = fmt.Errorf("%s: %w", budget, metering.ErrBudgetExceeded)
		}
		if err != nil {
			err = fmt.Errorf("%s turn: %w (the CLI: %w)", a.drv.Name(), berr, err)
		} else {
			err = fmt.Errorf("%s turn: %w", a.drv.Name(), berr)
		}
	}
	if t.rec != nil && t.verification == nil { // the turn failed before its outcome
		_, t.verification = t.verifyTurn("")
	}
	if a.proxy != nil {
		res.Usage = &spent
		if t.verification != nil {
			t.verification.CompareUsage(spent.Usage)
		}
	}
	if t.verification != nil && t.unbackedEnd {
		t.verification.UnbackedEnd = true
	}
	if t.limitErr != nil {
		t.recordDropped()
	}
	if t.session == "" && t.lines > 0 {
		// The CLI never named its session (it crashed early, say): keep
		// its output under the container's name.
		t.setSession(unknownSessionPrefix + a.sb.Name())
	}
	res.SessionID = t.session
	res.Verification = t.verification
	done := Payload{Text: res.Reply}
	if err != nil {
		t.emit(Event{Kind: KindError, Payload: Payload{Text: t.redact(err.Error()), IsError: true}})
		done.IsError = true
		done.Text = ""
	}
	code := xres.ExitCode
	done.ExitCode = &code
	t.emit(Event{Kind: KindDone, Payload: done})
	res.Events = t.events
	if t.log != nil {
		res.AuditDir = t.log.Dir()
	}
	return res, err
}

func (t *turn) redact(s string) string { return t.a.redact(s) }

// redact replaces the agent's secrets in s.
func (a *Agent) redact(s string) string {
	for _, sec := range a.secrets {
		if len(sec) >= 4 {
			s = strings.ReplaceAll(s, sec, audit.Redacted)
		}
	}
	return s
}

// line handles one raw stdout line.
func (t *turn) line(raw []byte, cut bool) {
	if t.limitErr != nil {
		t.dropped.lines++
		t.dropped.bytes += int64(len(raw)) + 1
		return
	}
	t.emitDenied()
	t.turnLines++
	if lim := t.a.cfg.Limits.TurnLines; lim > 0 && t.turnLines > lim {
		t.overLimit(raw, "max_turn_lines: more than %d output lines", lim)
		return
	}
	if t.log != nil {
		if why := t.auditOver(int64(len(raw)) + 1); why != "" {
			t.overLimit(raw, "%s", why)
			return
		}
	}
	t.lines++
	no := t.lines
	if t.log != nil {
		t.writeRaw(raw)
	} else if t.a.audit && t.session == "" {
		t.pendingSize += int64(len(raw)) + 1
		if lim := t.a.cfg.Limits.AuditTurnBytes; lim > 0 && t.pendingSize > lim {
			t.lines--
			t.overLimit(raw, "max_audit_turn_bytes: more than %d bytes before the CLI named its session", lim)
			return
		}
		t.pending = append(t.pending, append([]byte(nil), raw...))
	}
	evs := t.parser.Parse(raw)
	if cut {
		evs = append(evs, Event{Kind: KindRaw, Payload: Payload{Text: fmt.Sprintf("line longer than %d bytes was cut", maxLineBytes), IsError: true}})
	}
	for _, ev := range evs {
		if ev.Kind == KindSession && ev.SessionID != "" {
			t.setSession(ev.SessionID)
		}
		if ev.SessionID != "" && t.session == "" {
			t.setSession(ev.SessionID)
		}
		ev.Line = no
		if !t.keep(ev) {
			return
		}
		t.verifyNow(&ev)
		t.emit(ev)
	}
}

// eventSize approximates the bytes an event holds.
func eventSize(ev Event) int64 {
	p := ev.Payload
	return int64(200 + len(p.Text) + len(p.Tool) + len(p.CallID) + len(p.Command) + len(p.Path) + len(p.Input) + len(p.Output) + len(p.Host) + len(p.Raw) + len(ev.SessionID))
}

// keep reports whether the turn may keep one more parsed event, ending the
// turn when it may not (max_turn_events, max_turn_event_bytes).
func (t *turn) keep(ev Event) bool {
	if t.limitErr != nil {
		return false
	}
	lim := t.a.cfg.Limits
	size := eventSize(ev)
	why := ""
	if t.log != nil {
		why = t.auditOver(2 * size)
	}
	switch {
	case lim.TurnEvents > 0 && len(t.events) >= lim.TurnEvents:
		t.overLimit(nil, "max_turn_events: more than %d events", lim.TurnEvents)
	case lim.TurnEventBytes > 0 && t.eventBytes+size > lim.TurnEventBytes:
		t.overLimit(nil, "max_turn_event_bytes: events holding more than %d bytes", lim.TurnEventBytes)
	case why != "":
		t.overLimit(nil, "%s", why)
	default:
		t.eventBytes += size
		return true
	}
	return false
}

// auditOver names the audit bound that n more bytes would pass, or "".
func (t *turn) auditOver(n int64) string {
	lim := t.a.cfg.Limits
	size := t.log.Size()
	switch {
	case lim.AuditTurnBytes > 0 && size-t.auditStart+n > lim.AuditTurnBytes:
		return fmt.Sprintf("max_audit_turn_bytes: the turn's audit would pass %d bytes", lim.AuditTurnBytes)
	case lim.AuditSessionBytes > 0 && size+n > lim.AuditSessionBytes:
		return fmt.Sprintf("max_audit_session_bytes: the session's audit would pass %d bytes", lim.AuditSessionBytes)
	case lim.AuditDayBytes > 0 && t.a.auditDay.Bytes+size-t.auditStart+n > lim.AuditDayBytes:
		return fmt.Sprintf("max_audit_day_bytes: the day's audit would pass %d bytes", lim.AuditDayBytes)
	}
	return ""
}

// overLimit ends the turn: the CLI's output passed a bound. Later lines
// are counted, not kept; the CLI is stopped through the turn's context.
func (t *turn) overLimit(raw []byte, format string, args ...any) {
	t.limitErr = fmt.Errorf("%w: %s", ErrOutputLimit, fmt.Sprintf(format, args...))
	if raw != nil {
		t.dropped.lines++
		t.dropped.bytes += int64(len(raw)) + 1
	}
	t.cancel(t.limitErr)
}

// recordDropped writes what a turn past a bound left out, once, to the
// audit (past the bound: it is one short line).
func (t *turn) recordDropped() {
	t.emit(Event{Kind: KindOutputLimit, Payload: Payload{
		Text: fmt.Sprintf("%v; %d more output lines (%d bytes) were dropped", t.limitErr, t.dropped.lines, t.dropped.bytes), IsError: true,
	}})
}

// setSession records the session id and opens its audit folder, writing
// the lines that arrived before the id was known.
func (t *turn) setSession(id string) {
	if id == t.session && (t.log != nil || !t.a.audit) {
		return
	}
	if t.session != "" && t.session != id {
		// A new id mid-turn (a CLI that forked): audit goes on in the
		// first folder; the agent continues the new id.
		t.session = id
		return
	}
	t.session = id
	st := t.a.sessions[id]
	if st == nil {
		st = &sessionState{created: t.started}
		t.a.sessions[id] = st
	}
	if !t.a.audit || t.log != nil {
		return
	}
	l, err := audit.Open(t.a.cfg.AuditRoot, st.created, id, t.a.secrets)
	if err != nil {
		t.warn(err)
		return
	}
	t.log = l
	t.auditStart = l.Size()
	t.a.auditDay.Open(t.a.cfg.AuditRoot, st.created)
	for _, raw := range t.pending {
		t.writeRaw(raw)
	}
	for _, ev := range t.events {
		if err := t.log.Event(ev); err != nil {
			t.warn(err)
		}
	}
	t.pending = nil
}

func (t *turn) writeRaw(raw []byte) {
	if err := t.log.Raw(raw); err != nil {
		t.warn(err)
	}
}

func (t *turn) warn(err error) {
	if !t.auditErr { // one warning per turn is enough
		t.a.log.Warn("sandbox-agent: audit write failed; the turn goes on", "err", err)
		t.auditErr = true
	}
}

// emit completes an event, records it, audits it and hands it out.
func (t *turn) emit(ev Event) {
	ev.Turn = t.no
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.SessionID == "" {
		ev.SessionID = t.session
	}
	t.events = append(t.events, ev)
	if t.record != nil {
		t.a.recordEvent(t.record, ev)
	}
	if t.log != nil {
		if err := t.log.Event(ev); err != nil {
			t.warn(err)
		}
	}
	if t.fn != nil {
		t.fn(ev)
	}
}

// finish records the turn in the session's state and status.json.
func (t *turn) finish(res TurnResult, err error) {
	a := t.a
	if t.session != "" {
		st := a.sessions[t.session]
		if st == nil {
			st = &sessionState{created: t.started}
			a.sessions[t.session] = st
		}
		st.lines = t.lines
		ts := audit.TurnStatus{
			Turn: t.no, Prompt: t.redact(t.spec.Prompt), Started: t.started.UTC(), DurationMS: res.Duration.Milliseconds(),
			ExitCode: res.ExitCode, Reply: res.Reply, Events: len(res.Events),
		}
		if t.lines >= t.firstLine {
			ts.FirstLine, ts.LastLine = t.firstLine, t.lines
		}
		if err != nil {
			ts.Error = t.redact(err.Error())
		}
		ts.Verification = t.verification
		st.status.Turns = append(st.status.Turns, ts)
		st.status.SessionID = t.session
		st.status.Driver = a.drv.Name()
		st.status.Model = a.model
		st.status.Image = a.image
		st.status.Container = a.sb.Name()
		if st.status.Created.IsZero() { // an adopted session's is kept
			st.status.Created = st.created.UTC()
		}
		st.status.Updated = time.Now().UTC()
		if t.log != nil {
			if err := t.log.Status(st.status); err != nil {
				t.warn(err)
			}
		}
	}
	if t.log != nil {
		t.a.auditDay.Bytes += t.log.Size() - t.auditStart
		t.log.Close()
	}
}

// outcomeOf names how a turn ended, for telemetry: "ok" or the kind of
// failure.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, metering.ErrBudgetExceeded):
		return "budget_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}
