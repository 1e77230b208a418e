package opencode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// run runs argv in the container and fails on a non-zero exit.
func run(ctx context.Context, c sandboxagent.ContainerOps, req sandboxagent.ExecRequest) (sandboxagent.ExecResult, error) {
	res, err := c.Run(ctx, req)
	if err != nil {
		return res, fmt.Errorf("opencode: %s: %w", strings.Join(req.Cmd[:min(len(req.Cmd), 3)], " "), err)
	}
	if res.TimedOut {
		return res, fmt.Errorf("opencode: %s: %w", strings.Join(req.Cmd[:min(len(req.Cmd), 3)], " "), sandboxagent.ErrTimeout)
	}
	if res.ExitCode != 0 {
		f := kit.Failure{Driver: "opencode", ExitCode: res.ExitCode, Stderr: stripANSI(string(res.Stderr))}
		return res, f.Err(lastLine(string(res.Stderr), fmt.Sprintf("%s failed", strings.Join(req.Cmd[:min(len(req.Cmd), 3)], " "))), 0)
	}
	return res, nil
}

var sessionIDRe = lazyre.New(`^ses_[A-Za-z0-9]+$`)

// ids: opencode's session ids are "ses_" and letters and digits.
var ids = kit.SessionIDs{Driver: "opencode", Form: "ses_<letters and digits>", Valid: sessionIDRe.MatchString}

func quietEnv() map[string]string {
	return map[string]string{"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1"}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var _ sandboxagent.Forker = (*Driver)(nil)

// Fork copies a session into a new one through opencode's server API.
func (d *Driver) Fork(ctx context.Context, c sandboxagent.ContainerOps, sessionID string) (string, error) {
	if err := ids.Check(sessionID); err != nil {
		return "", err
	}
	env := quietEnv()
	env["OPENCODE_SERVER_PASSWORD"] = randHex(16)
	// --port 0: opencode takes 4096, or a random free port when 4096 is
	// taken (several host-network sandboxes share the loopback).
	res, err := run(ctx, c, sandboxagent.ExecRequest{
		Cmd: []string{"sh", "-c", forkScript, "opencode-fork", sessionID},
		Env: env,
	})
	if err != nil {
		return "", fmt.Errorf("opencode: fork %s: %w", sessionID, err)
	}
	var info struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Stdout, &info); err != nil || ids.Check(info.ID) != nil {
		return "", fmt.Errorf("opencode: fork %s: unexpected answer %q", sessionID, kit.Cut(string(res.Stdout), 300))
	}
	return info.ID, nil
}

var _ sandboxagent.SessionStore = (*Driver)(nil)

// ListSessions lists the sessions of the sandbox's working directory,
// newest first.
func (d *Driver) ListSessions(ctx context.Context, c sandboxagent.ContainerOps) ([]sandboxagent.SessionInfo, error) {
	res, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"opencode", "session", "list", "--format", "json"}, Env: quietEnv()})
	if err != nil {
		return nil, err
	}
	return parseSessionList(res.Stdout)
}

func parseSessionList(out []byte) ([]sandboxagent.SessionInfo, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return []sandboxagent.SessionInfo{}, nil
	}
	var list []struct {
		ID        string `json:"id"`
		Title     string `json:"title"`
		Updated   int64  `json:"updated"`
		Directory string `json:"directory"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("opencode: session list: %w: %q", err, kit.Cut(string(out), 300))
	}
	infos := make([]sandboxagent.SessionInfo, 0, len(list))
	for _, s := range list {
		info := sandboxagent.SessionInfo{ID: s.ID, Title: strings.TrimSpace(s.Title)}
		if s.Updated > 0 {
			info.Updated = time.UnixMilli(s.Updated).UTC().Format(time.RFC3339)
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// DeleteSession deletes a session (and its messages).
func (d *Driver) DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error {
	if err := ids.Check(id); err != nil {
		return err
	}
	_, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"opencode", "session", "delete", id}, Env: quietEnv()})
	return err
}

// dumpFile is the SessionDump file holding `opencode export` output.
const dumpFile = "export.json"

// DumpSession exports a session (`opencode export`).
func (d *Driver) DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error) {
	if err := ids.Check(id); err != nil {
		return sandboxagent.SessionDump{}, err
	}
	res, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"opencode", "export", id}, Env: quietEnv(), MaxOutputBytes: 256 << 20})
	if err != nil {
		return sandboxagent.SessionDump{}, err
	}
	if res.Truncated {
		return sandboxagent.SessionDump{}, fmt.Errorf("opencode: export %s: %w: output too large", id, sandboxagent.ErrLimitExceeded)
	}
	var exp struct {
		Info struct {
			ID        string `json:"id"`
			Directory string `json:"directory"`
			Title     string `json:"title"`
		} `json:"info"`
	}
	if err := json.Unmarshal(res.Stdout, &exp); err != nil || exp.Info.ID != id {
		return sandboxagent.SessionDump{}, fmt.Errorf("opencode: export %s: unexpected output %q", id, kit.Cut(string(res.Stdout), 300))
	}
	return sandboxagent.SessionDump{
		Driver: d.Name(), SessionID: id,
		Files: map[string][]byte{dumpFile: res.Stdout},
		Meta:  map[string]string{"format": "opencode export", "directory": exp.Info.Directory, "title": exp.Info.Title},
	}, nil
}

var importedRe = lazyre.New(`Imported session: (ses_[A-Za-z0-9]+)`)

// LoadSession imports a dumped session (`opencode import`); the id is kept.
func (d *Driver) LoadSession(ctx context.Context, c sandboxagent.ContainerOps, dump sandboxagent.SessionDump) (string, error) {
	if err := ids.CheckDump(dump); err != nil {
		return "", err
	}
	data, err := ids.DumpFile(dump, dumpFile)
	if err != nil {
		return "", err
	}
	var exp struct {
		Info struct {
			ID string `json:"id"`
		} `json:"info"`
	}
	if err := json.Unmarshal(data, &exp); err != nil || ids.Check(exp.Info.ID) != nil {
		return "", fmt.Errorf("%w: opencode: session dump %s is not an opencode export", sandboxagent.ErrInvalidArgument, dumpFile)
	}
	tmp := "/tmp/sandbox-agent-opencode-import-" + randHex(8) + ".json"
	if err := c.WriteFile(ctx, tmp, data, 0o644); err != nil {
		return "", err
	}
	res, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"opencode", "import", tmp}, Env: quietEnv()})
	_, _ = c.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"rm", "-f", "--", tmp}})
	if err != nil {
		return "", err
	}
	if m := importedRe.Get().FindSubmatch(append(res.Stdout, res.Stderr...)); m != nil {
		return string(m[1]), nil
	}
	return exp.Info.ID, nil
}
