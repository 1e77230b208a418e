package claude

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/sandboxsh"
)

// Where the CLI keeps things, relative to $HOME.
const (
	projectsDir = ".claude/projects"
	rulesFile   = ".claude/CLAUDE.md"
	skillsDir   = ".claude/skills"
	sessionEnv  = ".claude/session-env"
)

// Dump file names.
const (
	dumpTranscript = "transcript.jsonl"
	dumpFilesDir   = "files/"
	metaProject    = "project"
)

// exitNoSession is the exit code the scripts below use for "no such
// session"; exitExists for "that session already exists".
const (
	exitNoSession = sandboxsh.ExitNoSession
	exitExists    = sandboxsh.ExitExists
)

// maxTranscript caps one session file read back from the sandbox.
const maxTranscript = 256 << 20

// sh runs script in the sandbox; see sandboxsh.Run.
func sh(ctx context.Context, c sandboxagent.ContainerOps, stdin []byte, script string, args ...string) ([]byte, int, error) {
	return sandboxsh.Run(ctx, c, "claude", stdin, script, args...)
}

// writeHomeFile writes data to $HOME/rel as the sandbox's user; see
// sandboxsh.WriteHomeFile.
func writeHomeFile(ctx context.Context, c sandboxagent.ContainerOps, rel string, data []byte, mode fs.FileMode) error {
	return sandboxsh.WriteHomeFile(ctx, c, "claude", rel, data, mode)
}

// home is the sandbox user's home directory.
func home(ctx context.Context, c sandboxagent.ContainerOps) (string, error) {
	out, _, err := sh(ctx, c, nil, `printf '%s' "$HOME"`)
	if err != nil {
		return "", err
	}
	h := strings.TrimSpace(string(out))
	if !path.IsAbs(h) {
		return "", fmt.Errorf("claude: sandbox user has no usable HOME (%q)", h)
	}
	return h, nil
}

func checkID(id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: claude session id %q is not a UUID", sandboxagent.ErrInvalidArgument, id)
	}
	return nil
}

func noSession(id string) error {
	return fmt.Errorf("claude: session %s: %w", id, sandboxagent.ErrPathNotFound)
}

// newID is a random (version 4) UUID, the form the CLI uses.
func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// findScript prints the transcript of session $1 (the first found under
// any project folder) or exits exitNoSession.
const findScript = `f=$(find "$HOME/` + projectsDir + `" -mindepth 2 -maxdepth 2 -type f -name "$1.jsonl" 2>/dev/null | head -n 1)
[ -n "$f" ] || exit 3
`

// Fork copies session id (its transcript, with the id replaced by the new
// one, and its folder) into a new session beside it.
func (d *Driver) Fork(ctx context.Context, c sandboxagent.ContainerOps, id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	nid, err := newID()
	if err != nil {
		return "", err
	}
	script := findScript + `set -e
dir=$(dirname -- "$f")
[ ! -e "$dir/$2.jsonl" ] || exit 4
sed "s/$1/$2/g" "$f" > "$dir/$2.jsonl.tmp"
if [ -d "$dir/$1" ]; then cp -R -- "$dir/$1" "$dir/$2"; fi
mv -f -- "$dir/$2.jsonl.tmp" "$dir/$2.jsonl"`
	_, code, err := sh(ctx, c, nil, script, id, nid)
	switch {
	case err != nil:
		return "", err
	case code == exitNoSession:
		return "", noSession(id)
	case code == exitExists:
		return "", fmt.Errorf("claude: fork: session %s: %w", nid, sandboxagent.ErrDestinationExists)
	}
	return nid, nil
}

// InstallSkill puts the skill in ~/.claude/skills/<name>/, replacing any
// skill of that name.
func (d *Driver) InstallSkill(ctx context.Context, c sandboxagent.ContainerOps, s sandboxagent.Skill) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if _, _, err := sh(ctx, c, nil, `rm -rf -- "$HOME/$1"`, path.Join(skillsDir, s.Name)); err != nil {
		return err
	}
	names := make([]string, 0, len(s.Files))
	for n := range s.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeHomeFile(ctx, c, path.Join(skillsDir, s.Name, n), s.Files[n], 0o644); err != nil {
			return fmt.Errorf("claude: install skill %s: %w", s.Name, err)
		}
	}
	return nil
}

// InstallRules writes the user-global ~/.claude/CLAUDE.md (empty rules
// remove it).
func (d *Driver) InstallRules(ctx context.Context, c sandboxagent.ContainerOps, rules string) error {
	if rules == "" {
		_, _, err := sh(ctx, c, nil, `rm -f -- "$HOME/$1"`, rulesFile)
		return err
	}
	return writeHomeFile(ctx, c, rulesFile, []byte(rules), 0o644)
}

// ListSessions lists every transcript under ~/.claude/projects, newest
// first.
func (d *Driver) ListSessions(ctx context.Context, c sandboxagent.ContainerOps) ([]sandboxagent.SessionInfo, error) {
	script := `d="$HOME/` + projectsDir + `"
[ -d "$d" ] || exit 0
find "$d" -mindepth 2 -maxdepth 2 -type f -name '*.jsonl' -printf '%T@\t%p\n' | while IFS="$(printf '\t')" read -r t p; do
  lp=$(grep -F '"type":"last-prompt"' "$p" | tail -n 1)
  printf '%s\t%s\t%s\n' "$t" "$p" "$lp"
done`
	out, _, err := sh(ctx, c, nil, script)
	if err != nil {
		return nil, err
	}
	return parseList(out), nil
}

// parseList reads the lines "mtime<TAB>path<TAB>last-prompt record".
func parseList(out []byte) []sandboxagent.SessionInfo {
	type item struct {
		info sandboxagent.SessionInfo
		t    float64
	}
	var items []item
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.SplitN(l, "\t", 3)
		if len(f) < 2 {
			continue
		}
		id := strings.TrimSuffix(path.Base(f[1]), ".jsonl")
		if !validID(id) {
			continue
		}
		it := item{info: sandboxagent.SessionInfo{ID: id, Path: f[1]}}
		if t, err := strconv.ParseFloat(f[0], 64); err == nil {
			it.t = t
			sec := int64(t)
			it.info.Updated = time.Unix(sec, int64((t-float64(sec))*1e9)).UTC().Format(time.RFC3339)
		}
		if len(f) == 3 && f[2] != "" {
			var lp struct {
				LastPrompt string `json:"lastPrompt"`
			}
			if json.Unmarshal([]byte(f[2]), &lp) == nil {
				it.info.Title = title(lp.LastPrompt)
			}
		}
		items = append(items, it)
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].t > items[j].t })
	infos := make([]sandboxagent.SessionInfo, len(items))
	for i, it := range items {
		infos[i] = it.info
	}
	return infos
}

// title is a prompt shortened to one line of at most 80 characters.
func title(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:79]) + "…"
	}
	return s
}

// DeleteSession removes the session's transcript, folder and session-env.
func (d *Driver) DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	script := `found=0
for f in "$HOME/` + projectsDir + `"/*/"$1.jsonl"; do
  [ -f "$f" ] || continue
  found=1
  rm -rf -- "$f" "${f%.jsonl}" || exit 1
done
rm -rf -- "$HOME/` + sessionEnv + `/$1"
[ "$found" = 1 ] || exit 3`
	_, code, err := sh(ctx, c, nil, script, id)
	if err != nil {
		return err
	}
	if code != 0 {
		return noSession(id)
	}
	return nil
}

// DumpSession reads the session's transcript and folder.
func (d *Driver) DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error) {
	if err := checkID(id); err != nil {
		return sandboxagent.SessionDump{}, err
	}
	script := findScript + `printf '%s\n' "$f"
dir="${f%.jsonl}"
if [ -d "$dir" ]; then find "$dir" -type f -printf '%P\n'; fi`
	out, code, err := sh(ctx, c, nil, script, id)
	if err != nil {
		return sandboxagent.SessionDump{}, err
	}
	if code != 0 {
		return sandboxagent.SessionDump{}, noSession(id)
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
	if dump.Driver != "" && dump.Driver != d.Name() {
		return "", fmt.Errorf("%w: a %s session cannot be loaded into claude", sandboxagent.ErrInvalidArgument, dump.Driver)
	}
	id := dump.SessionID
	if err := checkID(id); err != nil {
		return "", err
	}
	tr, ok := dump.Files[dumpTranscript]
	if !ok {
		return "", fmt.Errorf("%w: claude session dump without %s", sandboxagent.ErrInvalidArgument, dumpTranscript)
	}
	project := dump.Meta[metaProject]
	if project == "" {
		out, _, err := sh(ctx, c, nil, `pwd`)
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
	_, code, err := sh(ctx, c, nil, findScript+`exit 4`, id)
	if err != nil {
		return "", err
	}
	if code == exitExists {
		return "", fmt.Errorf("claude: load: session %s: %w", id, sandboxagent.ErrDestinationExists)
	}
	base := path.Join(projectsDir, project)
	for name, data := range dump.Files {
		if rel, ok := strings.CutPrefix(name, dumpFilesDir); ok {
			if err := writeHomeFile(ctx, c, path.Join(base, id, rel), data, 0o600); err != nil {
				return "", fmt.Errorf("claude: load %s: %w", id, err)
			}
		}
	}
	// The transcript last: a half-loaded session is not resumable.
	if err := writeHomeFile(ctx, c, path.Join(base, id+".jsonl"), tr, 0o600); err != nil {
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
