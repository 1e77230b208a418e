package codex

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// maxForkDepth bounds the chain of parents a dump follows.
const maxForkDepth = 32

// rollout is one session file found in the container.
type rollout struct {
	id      string
	abs     string // absolute path in the container
	rel     string // path relative to $CODEX_HOME ("sessions/...")
	updated time.Time
}

// rollouts lists the rollout files under $CODEX_HOME/sessions whose id is
// id ("" = all).
func (d *Driver) rollouts(ctx context.Context, c sandboxagent.ContainerOps, id string) ([]rollout, error) {
	pattern := "rollout-*.jsonl"
	if id != "" {
		pattern = "rollout-*-" + id + ".jsonl"
	}
	stdout, _, err := d.sh().Run(ctx, c, nil, rolloutsScript, pattern)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(string(stdout), "\n"), "\n")
	home := lines[0]
	var out []rollout
	for _, l := range lines[1:] {
		ts, rel, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		base := path.Base(rel)
		if !strings.HasSuffix(base, ".jsonl") || len(base) < len("rollout-.jsonl")+36 {
			continue
		}
		rid := strings.TrimSuffix(base, ".jsonl")
		rid = rid[len(rid)-36:]
		if !kit.IsUUID(rid) {
			continue
		}
		r := rollout{id: rid, abs: home + "/sessions/" + rel, rel: "sessions/" + rel}
		r.updated, _ = kit.ParseTime(ts)
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].updated.After(out[j].updated) })
	return out, nil
}

func (d *Driver) find(ctx context.Context, c sandboxagent.ContainerOps, id string) (rollout, error) {
	if err := ids.Check(id); err != nil {
		return rollout{}, err
	}
	rs, err := d.rollouts(ctx, c, id)
	if err != nil {
		return rollout{}, err
	}
	if len(rs) == 0 {
		return rollout{}, fmt.Errorf("%w: %s (%w)", ErrSessionNotFound, id, sandboxagent.ErrPathNotFound)
	}
	return rs[0], nil
}

var _ sandboxagent.SessionStore = (*Driver)(nil)

// ListSessions implements sandboxagent.Driver: the rollout files, newest
// first.
func (d *Driver) ListSessions(ctx context.Context, c sandboxagent.ContainerOps) ([]sandboxagent.SessionInfo, error) {
	rs, err := d.rollouts(ctx, c, "")
	if err != nil {
		return nil, err
	}
	out := make([]sandboxagent.SessionInfo, 0, len(rs))
	for _, r := range rs {
		info := sandboxagent.SessionInfo{ID: r.id, Path: r.abs}
		if !r.updated.IsZero() {
			info.Updated = kit.Updated(r.updated)
		}
		out = append(out, info)
	}
	return out, nil
}

var _ sandboxagent.Forker = (*Driver)(nil)

// Fork implements sandboxagent.Driver with `codex exec fork ID` (no prompt,
// so no model request).
func (d *Driver) Fork(ctx context.Context, c sandboxagent.ContainerOps, sessionID string) (string, error) {
	if err := ids.Check(sessionID); err != nil {
		return "", err
	}
	cmd := append([]string{"codex", "exec", "fork"}, execFlags()...)
	cmd = append(cmd, "--", sessionID)
	res, err := c.Run(ctx, sandboxagent.ExecRequest{Cmd: cmd, Env: d.env(true)})
	if err != nil {
		return "", fmt.Errorf("codex: fork: %w", err)
	}
	p := newExecParser(sandboxagent.Turn{})
	for _, l := range bytes.Split(res.Stdout, []byte("\n")) {
		p.Parse(l)
	}
	if res.ExitCode != 0 || p.session == "" || p.session == sessionID {
		msg := p.lastError
		if msg == "" {
			msg = stderrError(string(res.Stderr))
		}
		if msg == "" {
			msg = "no new thread id"
		}
		f := kit.Failure{Driver: "codex", ExitCode: res.ExitCode, Stderr: string(res.Stderr)}
		return "", f.Err("fork "+sessionID+": "+msg, 0)
	}
	return p.session, nil
}

// sessionMeta is what the driver reads from a rollout's first line.
type sessionMeta struct {
	Type    string `json:"type"`
	Payload struct {
		ID           string `json:"id"`
		ForkedFromID string `json:"forked_from_id"`
		HistoryBase  *struct {
			ThreadID string `json:"thread_id"`
		} `json:"history_base"`
		CWD        string `json:"cwd"`
		CLIVersion string `json:"cli_version"`
	} `json:"payload"`
}

func readMeta(data []byte) (sessionMeta, bool) {
	first, _, _ := bytes.Cut(data, []byte("\n"))
	var m sessionMeta
	if json.Unmarshal(first, &m) != nil || m.Type != "session_meta" {
		return m, false
	}
	return m, true
}

// parent is the thread a rollout's history is based on ("" for none).
func (m sessionMeta) parent() string {
	if m.Payload.HistoryBase != nil && m.Payload.HistoryBase.ThreadID != "" {
		return m.Payload.HistoryBase.ThreadID
	}
	return m.Payload.ForkedFromID
}

// DumpSession implements sandboxagent.Driver: the session's rollout and
// those of the threads it was forked from.
func (d *Driver) DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error) {
	dump := sandboxagent.SessionDump{Driver: d.Name(), SessionID: id, Files: map[string][]byte{}, Meta: map[string]string{}}
	var chain []string
	seen := map[string]bool{}
	for cur, depth := id, 0; cur != "" && !seen[cur]; depth++ {
		seen[cur] = true
		if depth >= maxForkDepth {
			return sandboxagent.SessionDump{}, fmt.Errorf("codex: dump %s: fork chain longer than %d", id, maxForkDepth)
		}
		r, err := d.find(ctx, c, cur)
		if err != nil {
			if depth > 0 {
				return sandboxagent.SessionDump{}, fmt.Errorf("codex: dump %s: parent %s: %w", id, cur, err)
			}
			return sandboxagent.SessionDump{}, err
		}
		data, err := c.ReadFile(ctx, r.abs, 0)
		if err != nil {
			return sandboxagent.SessionDump{}, fmt.Errorf("codex: dump %s: %w", id, err)
		}
		dump.Files[r.rel] = data
		chain = append(chain, cur)
		m, ok := readMeta(data)
		if depth == 0 {
			dump.Meta["rollout"] = r.rel
			if ok {
				dump.Meta["cwd"] = m.Payload.CWD
				dump.Meta["cli_version"] = m.Payload.CLIVersion
			}
		}
		if !ok {
			break
		}
		cur = m.parent()
	}
	if len(chain) > 1 {
		dump.Meta["forked_from"] = strings.Join(chain[1:], ",")
	}
	return dump, nil
}

// LoadSession implements sandboxagent.Driver: the dump's rollout files are
// written under $CODEX_HOME, where `codex exec resume` finds them.
func (d *Driver) LoadSession(ctx context.Context, c sandboxagent.ContainerOps, dump sandboxagent.SessionDump) (string, error) {
	if err := ids.CheckDump(dump); err != nil {
		return "", err
	}
	names := make([]string, 0, len(dump.Files))
	own := false
	for n := range dump.Files {
		base := path.Base(n)
		if !fs.ValidPath(n) || !strings.HasPrefix(n, "sessions/") || !strings.HasPrefix(base, "rollout-") || !strings.HasSuffix(base, ".jsonl") {
			return "", fmt.Errorf("%w: codex dump file %q is not a rollout under sessions/", sandboxagent.ErrInvalidArgument, n)
		}
		if strings.HasSuffix(base, "-"+dump.SessionID+".jsonl") {
			own = true
		}
		names = append(names, n)
	}
	if !own {
		return "", fmt.Errorf("%w: codex dump has no rollout for %s", sandboxagent.ErrInvalidArgument, dump.SessionID)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := d.sh().WriteFile(ctx, c, n, dump.Files[n], 0o644); err != nil {
			return "", err
		}
	}
	return dump.SessionID, nil
}

// DeleteSession implements sandboxagent.Driver with `codex delete --force`.
// Codex refuses to delete a thread a fork depends on; a thread its index
// does not know (loaded from a dump) has its rollout removed, unless a fork
// depends on it.
func (d *Driver) DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error {
	if _, err := d.find(ctx, c, id); err != nil {
		return err
	}
	res, err := d.sh().Exec(ctx, c, nil, deleteScript, id)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("codex: delete session %s: %s", id, kit.Fold(string(res.Stderr)))
	}
	return nil
}
