package claude

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// Where the CLI keeps things, relative to $HOME.
// (The session scripts, scripts/*.sh, name the same folders.)
const projectsDir = ".claude/projects"

// Dump file names.
const (
	dumpTranscript = "transcript.jsonl"
	dumpFilesDir   = "files/"
	metaProject    = "project"
)

// maxTranscript caps one session file read back from the sandbox.
const maxTranscript = 256 << 20

var (
	// sh runs scripts in the sandbox; its files are under $HOME.
	sh  = kit.Shell{Driver: "claude"}
	ids = kit.SessionIDs{Driver: "claude", Form: "a UUID", Valid: validID}
	// validID: the CLI's session ids are UUIDs.
	validID = kit.IsUUID
	newID   = kit.NewUUID
)

var _ sandboxagent.Forker = (*Driver)(nil)

// Fork copies session id (its transcript, with the id replaced by the new
// one, and its folder) into a new session beside it.
func (d *Driver) Fork(ctx context.Context, c sandboxagent.ContainerOps, id string) (string, error) {
	nid, err := newID()
	if err != nil {
		return "", err
	}
	return ids.Copy(ctx, c, sh, forkScript, id, nid)
}

var _ sandboxagent.SessionStore = (*Driver)(nil)

// ListSessions lists every transcript under ~/.claude/projects, newest
// first. The title is the last prompt: the later of the last last-prompt
// record and the last queued prompt (queue-operation enqueue). The CLI
// writes last-prompt lazily (with other metadata once enough bytes were
// appended, and at exit), so while a long-lived CLI serves the session
// the last-prompt record may still name an earlier turn's prompt.
func (d *Driver) ListSessions(ctx context.Context, c sandboxagent.ContainerOps) ([]sandboxagent.SessionInfo, error) {
	out, _, err := sh.Run(ctx, c, nil, listScript)
	if err != nil {
		return nil, err
	}
	return parseList(out), nil
}

// parseList reads the lines "mtime<TAB>path<TAB>last-prompt or enqueue
// record".
func parseList(out []byte) []sandboxagent.SessionInfo {
	return kit.ParseList(out, func(p string) string {
		if id := strings.TrimSuffix(path.Base(p), ".jsonl"); validID(id) {
			return id
		}
		return ""
	}, func(record []byte) string {
		var r struct {
			Type       string          `json:"type"`
			LastPrompt string          `json:"lastPrompt"`
			Content    json.RawMessage `json:"content"`
		}
		if json.Unmarshal(record, &r) != nil {
			return ""
		}
		prompt := r.LastPrompt
		if r.Type == "queue-operation" {
			prompt = ""
			_ = json.Unmarshal(r.Content, &prompt) // a prompt of blocks: no title
		}
		return kit.Title(kit.Fold(prompt), 80)
	})
}

// DeleteSession removes the session's transcript, folder and session-env.
func (d *Driver) DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error {
	_, _, err := ids.Run(ctx, c, sh, deleteScript, id)
	return err
}

// DumpSession reads the session's transcript and folder.
func (d *Driver) DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error) {
	out, _, err := ids.Run(ctx, c, sh, dumpScript, id)
	if err != nil {
		return sandboxagent.SessionDump{}, err
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	file := lines[0]
	if !path.IsAbs(file) {
		return sandboxagent.SessionDump{}, fmt.Errorf("claude: dump %s: unexpected path %q", id, file)
	}
	dump := sandboxagent.SessionDump{
		Driver: d.Name(), SessionID: id, Files: map[string][]byte{},
		Meta: map[string]string{metaProject: path.Base(path.Dir(file))},
	}
	data, err := c.ReadFile(ctx, file, maxTranscript)
	if err != nil {
		return sandboxagent.SessionDump{}, fmt.Errorf("claude: dump %s: %w", id, err)
	}
	dump.Files[dumpTranscript] = data
	dir := strings.TrimSuffix(file, ".jsonl")
	for _, rel := range lines[1:] {
		if rel == "" || !fs.ValidPath(rel) {
			continue
		}
		data, err := c.ReadFile(ctx, path.Join(dir, rel), maxTranscript)
		if err != nil {
			return sandboxagent.SessionDump{}, fmt.Errorf("claude: dump %s: %w", id, err)
		}
		dump.Files[dumpFilesDir+rel] = data
	}
	return dump, nil
}

// LoadSession installs a dump under its project folder and id; it refuses
// to replace a session of that id.
func (d *Driver) LoadSession(ctx context.Context, c sandboxagent.ContainerOps, dump sandboxagent.SessionDump) (string, error) {
	if err := ids.CheckDump(dump); err != nil {
		return "", err
	}
	id := dump.SessionID
	tr, err := ids.DumpFile(dump, dumpTranscript)
	if err != nil {
		return "", err
	}
	project := dump.Meta[metaProject]
	if project == "" {
		out, _, err := sh.Run(ctx, c, nil, `pwd`)
		if err != nil {
			return "", err
		}
		project = slug(strings.TrimSpace(string(out)))
	}
	if !fs.ValidPath(project) || strings.Contains(project, "/") || project == "." {
		return "", fmt.Errorf("%w: claude project folder %q", sandboxagent.ErrInvalidArgument, project)
	}
	for name := range dump.Files {
		if name == dumpTranscript {
			continue
		}
		rel, ok := strings.CutPrefix(name, dumpFilesDir)
		if !ok || !fs.ValidPath(rel) {
			return "", fmt.Errorf("%w: claude session dump file %q", sandboxagent.ErrInvalidArgument, name)
		}
	}
	if err := ids.CheckAbsent(ctx, c, sh, findScript, id); err != nil {
		return "", err
	}
	base := path.Join(projectsDir, project)
	for name, data := range dump.Files {
		if rel, ok := strings.CutPrefix(name, dumpFilesDir); ok {
			if err := sh.WriteFile(ctx, c, path.Join(base, id, rel), data, 0o600); err != nil {
				return "", fmt.Errorf("claude: load %s: %w", id, err)
			}
		}
	}
	// The transcript last: a half-loaded session is not resumable.
	if err := sh.WriteFile(ctx, c, path.Join(base, id+".jsonl"), tr, 0o600); err != nil {
		return "", fmt.Errorf("claude: load %s: %w", id, err)
	}
	return id, nil
}

// slug is the CLI's project folder name for a working directory: every
// character that is not an ASCII letter or digit becomes "-" (the CLI cuts
// paths longer than 200 characters and adds a hash; such a folder is
// simply not guessed here).
func slug(dir string) string {
	b := []byte(dir)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

// exitRecordTypes are the records the CLI appends to the session it served
// when its process stops (its cost totals, a late last-prompt): they change
// no history.
var exitRecordTypes = []string{"cost-state", "last-prompt"}

// ExitRecordsOnly reports whether transcript after is before with nothing
// but the CLI's exit records of session id appended, as whole lines: what a
// long-lived claude leaves in a session when the agent moves on to another
// (a fork) and stops it.
func ExitRecordsOnly(before, after []byte, id string) bool {
	extra, ok := bytes.CutPrefix(after, before)
	if !ok || len(extra) == 0 || len(before) > 0 && before[len(before)-1] != '\n' || extra[len(extra)-1] != '\n' {
		return false
	}
	for _, l := range bytes.Split(bytes.TrimSuffix(extra, []byte("\n")), []byte("\n")) {
		var r struct {
			Type      string `json:"type"`
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(l, &r) != nil || r.SessionID != id || !slices.Contains(exitRecordTypes, r.Type) {
			return false
		}
	}
	return true
}
