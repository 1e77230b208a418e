package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
)

// Checkpoints of a whole sandbox are engine commits of its container, kept
// as local images (never pushed). What the engines do differently here
// (measured on Docker 20.10 and Podman 4.3):
//
//   - Both merge the container's config into the committed image: its
//     environment (which can hold the user's secrets) and its labels
//     (ours name a live sandbox). A config body cannot undo that (Docker
//     merges it with the container's; Podman 4 ignores it), so Commit
//     sends Dockerfile instructions ("changes") that set every such key
//     back to the base image's value, or to empty, and checks the result.
//   - The parsers of those instructions differ. Docker's is the
//     Dockerfile's: quotes group, a backslash escapes \ " $, and $NAME is
//     expanded even inside double quotes. Podman 4's (libimage) only
//     strips one pair of surrounding quotes and takes the rest literally.
//     Later Podman hands them to buildah (OverrideChanges), which parses
//     them as Docker does; Commit assumes so from Podman 5 on (only 4.3
//     was at hand to measure), and its check of the image catches a wrong
//     guess.
//     Neither takes a newline inside an instruction (Docker joins them
//     with newlines; newer Podman splits on them), so such values are
//     refused.
//   - Podman's compatible API pauses the container only when asked
//     (pause=true): its default is false, unlike Docker's, and the API
//     client never sends pause=true. Podman 4 also refuses a commit
//     without a JSON body. The commit request is therefore made here.
//   - Podman adds PATH, TERM=xterm and container=podman to every
//     container's environment and commits them; it also reports HOME and
//     HOSTNAME, which it derives at each start and does not commit.
//   - Podman names a committed "name:tag" docker.io/library/name:tag and
//     an image made by its own CLI localhost/name:tag; Docker keeps
//     name:tag. Images reports both as name:tag.

// defaultPath is the PATH both engines give a container whose image and
// request set none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

var _ checkpoint.Engine = (*Runtime)(nil)

// Commit commits container id's filesystem as the local image ref
// ("repo:tag"), the container paused meanwhile so no write is torn. The
// image keeps the base image's environment and labels, not the
// container's (env values the container had are reset to the base image's
// or emptied), and gets labels(the container's changes in bytes, as the
// engine measured them before the commit) on top. maxBytes (> 0) bounds the layer the
// commit adds: a container whose changes are larger is not committed, and
// an image whose new layer came out larger (the sandbox wrote meanwhile)
// is removed; both are ErrCheckpointSize. size is that layer's size. On
// any failure after the commit the image is removed.
func (r *Runtime) Commit(ctx context.Context, id, ref string, labelsFor func(size int64) map[string]string, maxBytes int64) (size int64, err error) {
	repo, tag, err := splitRef(ref)
	if err != nil {
		return 0, fmt.Errorf("commit %s: %w", id, err)
	}
	ins, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{Size: true})
	if err != nil {
		return 0, classify("commit: inspect container", err, sandboxagent.ErrContainerNotFound)
	}
	c := ins.Container
	if c.Config == nil {
		return 0, fmt.Errorf("commit %s: the engine reported no container config", id)
	}
	var changed int64
	if c.SizeRw != nil {
		changed = *c.SizeRw
	}
	if maxBytes > 0 && changed > maxBytes {
		return 0, sizeError(id, changed, maxBytes)
	}
	var labels map[string]string
	if labelsFor != nil {
		labels = labelsFor(changed)
	}
	baseRef := c.Image // the image's ID: its name may have moved since
	if baseRef == "" {
		baseRef = c.Config.Image
	}
	base, err := r.cli.ImageInspect(ctx, baseRef)
	if err != nil {
		return 0, classify("commit: inspect base image "+baseRef, err, sandboxagent.ErrImageNotFound)
	}
	chk := commitCheck{id: id, hostname: c.Config.Hostname, baseSize: base.Size, ours: labels, maxBytes: maxBytes}
	if base.Config != nil {
		chk.baseEnv, chk.baseLabels, chk.baseUser = envMap(base.Config.Env), base.Config.Labels, base.Config.User
	}
	version, podman := r.podman()
	chk.podman = podman
	w := resetWriter{literal: podman && podmanMajor(version) < 5}
	changes, err := w.changes(c.Config, chk.baseEnv, chk.baseLabels, labels, podman)
	if err != nil {
		return 0, fmt.Errorf("commit %s: %w", id, err)
	}
	// The container's user (SandboxOptions.User) would become the
	// image's: a caller asking for "the image's user" would get it.
	if c.Config.User != chk.baseUser {
		u := chk.baseUser
		if u == "" {
			u = "0" // the base runs as root; USER takes no empty value
		}
		if strings.ContainsAny(u, " \t\r\n\x00") {
			return 0, fmt.Errorf("commit %s: %w: the base image's user %q", id, sandboxagent.ErrInvalidArgument, u)
		}
		changes = append(changes, "USER "+u)
	}
	imageID, err := r.commitRequest(ctx, id, repo, tag, changes)
	if err != nil {
		r.dropUnreported(ctx, ref, labels)
		return 0, err
	}
	img, err := r.cli.ImageInspect(ctx, imageID)
	if err != nil {
		err = classify("commit: inspect the new image", err, nil)
	} else {
		size, err = chk.check(img)
	}
	if err != nil {
		if rerr := r.dropImage(ctx, imageID); rerr != nil {
			return 0, fmt.Errorf("%w (and the image %s could not be removed: %v)", err, ref, rerr)
		}
		return 0, err
	}
	return size, nil
}

// sizeError is the ErrCheckpointSize of a container with size bytes of
// changes.
func sizeError(id string, size, limit int64) error {
	return fmt.Errorf("commit %s: %w: the sandbox's changes are %d bytes, the limit is %d", id, sandboxagent.ErrCheckpointSize, size, limit)
}

// splitRef splits "repo:tag" (a tag is required: a commit without one
// would be named latest, and a digest cannot name a commit).
func splitRef(ref string) (repo, tag string, err error) {
	i := strings.LastIndex(ref, ":")
	if i <= 0 || i == len(ref)-1 || strings.Contains(ref[i:], "/") || strings.Contains(ref, "@") {
		return "", "", fmt.Errorf("%w: image reference %q: want repository:tag", sandboxagent.ErrInvalidArgument, ref)
	}
	return ref[:i], ref[i+1:], nil
}

// podmanMajor is the major version of a libpod API version ("4.3.1"); 5
// when it cannot be read (a newer one, say).
func podmanMajor(version string) int {
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	n, _ := strconv.Atoi(major)
	if n == 0 {
		return 5
	}
	return n
}

// resetWriter writes the changes of a commit for the engine's parser.
type resetWriter struct {
	// literal: Podman 4's parser (quotes stripped, nothing escaped); else
	// the Dockerfile's.
	literal bool
}

// dockerfileEscaper escapes what a double-quoted Dockerfile word treats
// specially ($ would be expanded even there).
var dockerfileEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)

// word quotes s as a key or value of an ENV or LABEL instruction.
func (w resetWriter) word(s string, key bool) (string, error) {
	if strings.ContainsAny(s, "\n\r\x00") {
		return "", fmt.Errorf("%w: %q: a line break cannot be written into a commit's config", sandboxagent.ErrInvalidArgument, s)
	}
	if key && (s == "" || strings.Contains(s, "=")) {
		// Both parsers split the instruction at its first "=".
		return "", fmt.Errorf("%w: key %q: empty or holding \"=\"", sandboxagent.ErrInvalidArgument, s)
	}
	if !w.literal {
		s = dockerfileEscaper.Replace(s)
	}
	return `"` + s + `"`, nil
}

// instruction is `KIND "key"="value"`.
func (w resetWriter) instruction(kind, key, value string) (string, error) {
	k, err := w.word(key, true)
	if err != nil {
		return "", fmt.Errorf("%s %w", kind, err)
	}
	v, err := w.word(value, false)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", kind, key, err)
	}
	return kind + " " + k + "=" + v, nil
}

// changes resets every env key and label of the container to the base
// image's value (empty when the base has none), then adds ours.
func (w resetWriter) changes(cfg *container.Config, benv, baseLabels, ours map[string]string, podman bool) ([]string, error) {
	cenv := envMap(cfg.Env)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(cenv)) {
		v, ok := benv[k]
		if !ok {
			var emit bool
			if v, emit = engineReset(k, cenv[k], podman); !emit {
				continue
			}
		}
		ch, err := w.instruction("ENV", k, v)
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Labels)) {
		if _, mine := ours[k]; mine {
			continue
		}
		ch, err := w.instruction("LABEL", k, baseLabels[k])
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	for _, k := range slices.Sorted(maps.Keys(ours)) {
		ch, err := w.instruction("LABEL", k, ours[k])
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// engineReset is what an env key the base image lacks is set to, and
// whether to set it at all: empty, but not where the engine supplies the
// variable itself and an empty one would override it in every container
// of the image (its value is then the engine's, no user's).
func engineReset(key, value string, podman bool) (string, bool) {
	switch {
	case key == "PATH":
		return defaultPath, true // an empty PATH would break every exec
	case podman && (key == "HOME" || key == "HOSTNAME"):
		return "", false // derived at each start, not committed
	case podman && (key == "TERM" && value == "xterm" || key == "container" && value == "podman"):
		return value, true
	}
	return "", true
}

// engineEnv says whether key=value is one the engine gives containers by
// itself (so an image may carry it though the base image does not).
func engineEnv(key, value, hostname string, podman bool) bool {
	switch key {
	case "PATH":
		return value == defaultPath
	case "TERM":
		return podman && value == "xterm"
	case "container":
		return podman && value == "podman"
	case "HOSTNAME":
		return podman && hostname != "" && value == hostname
	}
	return false
}

// envMap reads KEY=VALUE entries (a bare KEY is an empty value).
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

// commitRequest makes the engine's commit call (see the top of this file
// for why not through the API client) and returns the new image's ID.
func (r *Runtime) commitRequest(ctx context.Context, id, repo, tag string, changes []string) (string, error) {
	q := url.Values{}
	q.Set("container", id)
	q.Set("repo", repo)
	q.Set("tag", tag)
	q.Set("pause", "true")
	q["changes"] = changes
	u := r.base + "/v" + r.cli.ClientVersion() + "/commit?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader("{}"))
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", id, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("commit %s: %w", id, ctx.Err())
		}
		return "", fmt.Errorf("commit %s: %w: %w", id, sandboxagent.ErrEngineUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("commit %s: %w", id, err)
	}
	if resp.StatusCode/100 != 2 {
		var m struct{ Message string }
		if json.Unmarshal(body, &m) != nil || m.Message == "" {
			m.Message = strings.TrimSpace(string(body))
		}
		err := fmt.Errorf("%s: %s", resp.Status, m.Message)
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", cerrdefs.ErrNotFound, err)
		}
		return "", classify("commit "+id, err, sandboxagent.ErrContainerNotFound)
	}
	var out struct {
		ID string `json:"Id"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.ID == "" {
		return "", fmt.Errorf("commit %s: the engine answered %q, no image ID", id, body)
	}
	return out.ID, nil
}

// commitCheck is what a committed image is checked against.
type commitCheck struct {
	id         string            // the container
	baseEnv    map[string]string // the base image's
	baseLabels map[string]string
	baseUser   string
	baseSize   int64
	hostname   string // the container's
	ours       map[string]string
	podman     bool
	maxBytes   int64
}

// check verifies the committed image: our labels on it, and no env value
// or label of the container's left (each is the base image's, empty, or
// one the engine gives every container). It returns the size of the
// layer the commit added.
func (k commitCheck) check(img client.ImageInspectResult) (int64, error) {
	if img.Config == nil {
		return 0, fmt.Errorf("commit %s: the engine reported no config for the new image", k.id)
	}
	for key, v := range k.ours {
		if got, ok := img.Config.Labels[key]; !ok || got != v {
			return 0, notReset(k.id, "label", key, "label "+strconv.Quote(v), "label missing or different")
		}
	}
	if u := img.Config.User; u != k.baseUser && !(k.baseUser == "" && (u == "0" || u == "")) {
		return 0, notReset(k.id, "user", "USER", "the base image's user", "the container's")
	}
	for _, e := range img.Config.Env {
		key, v, _ := strings.Cut(e, "=")
		if bv, ok := k.baseEnv[key]; v == "" || ok && bv == v || !ok && engineEnv(key, v, k.hostname, k.podman) {
			continue
		}
		// The value is the container's: never print it (it may be a secret).
		return 0, notReset(k.id, "env", key, "the base image's value or empty", "the container's value")
	}
	for key, v := range img.Config.Labels {
		if _, mine := k.ours[key]; mine || v == "" || v == k.baseLabels[key] {
			continue
		}
		return 0, notReset(k.id, "label", key, "the base image's value or empty", "the container's value")
	}
	size := max(img.Size-k.baseSize, 0)
	if k.maxBytes > 0 && size > k.maxBytes {
		return 0, sizeError(k.id, size, k.maxBytes)
	}
	return size, nil
}

// notReset is the hardening error of a committed config the engine did
// not reset.
func notReset(id, what, key, want, got string) error {
	return fmt.Errorf("commit %s: the engine did not reset the image's config: %w", id,
		&sandboxagent.HardeningError{Setting: "checkpoint image " + what + " " + key, Want: want, Got: got})
}

// dropImage removes a just-committed image by its ID (no other name, no
// container uses it yet), whatever ctx says.
func (r *Runtime) dropImage(ctx context.Context, imageID string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, err := r.cli.ImageRemove(ctx, imageID, client.ImageRemoveOptions{PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// dropUnreported removes the image a commit call that failed may have made
// all the same (the engine finishing after the connection or ctx ended):
// ref, if it carries our labels, which name this checkpoint alone.
func (r *Runtime) dropUnreported(ctx context.Context, ref string, ours map[string]string) {
	if len(ours) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	img, err := r.inspectImage(ctx, ref)
	if err != nil || img.Config == nil {
		return
	}
	for k, v := range ours {
		if got, ok := img.Config.Labels[k]; !ok || got != v {
			return
		}
	}
	_ = r.dropImage(ctx, img.ID)
}

// Images lists the images carrying the label key, one entry per tag
// (untagged images are left out), tags as Docker names them.
func (r *Runtime) Images(ctx context.Context, label string) ([]checkpoint.Image, error) {
	res, err := r.cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", label)})
	if err != nil {
		return nil, classify("list images", err, nil)
	}
	var out []checkpoint.Image
	for _, s := range res.Items {
		tags := slices.DeleteFunc(slices.Clone(s.RepoTags), func(t string) bool { return t == "" || strings.HasSuffix(t, ":<none>") })
		if len(tags) == 0 {
			continue
		}
		labels := s.Labels
		if labels == nil {
			ins, err := r.cli.ImageInspect(ctx, s.ID)
			if cerrdefs.IsNotFound(err) {
				continue // removed meanwhile
			}
			if err != nil {
				return nil, classify("inspect image "+s.ID, err, nil)
			}
			if ins.Config != nil {
				labels = ins.Config.Labels
			}
		}
		if _, ok := labels[label]; !ok {
			continue
		}
		for _, t := range tags {
			out = append(out, checkpoint.Image{
				Ref: familiarRef(t), ID: s.ID, Labels: maps.Clone(labels), Size: s.Size, Created: time.Unix(s.Created, 0),
			})
		}
	}
	slices.SortFunc(out, func(a, b checkpoint.Image) int { return strings.Compare(a.Ref, b.Ref) })
	return out, nil
}

// familiarRef is a tag as Docker prints it: without Podman's localhost/
// (its own images) or docker.io/library/ (those the compatible API named).
func familiarRef(ref string) string {
	for _, p := range []string{"localhost/", "docker.io/library/"} {
		if rest, ok := strings.CutPrefix(ref, p); ok {
			return rest
		}
	}
	return ref
}

// localName is ref under Podman's localhost/ when ref names no registry
// (Podman stores its own images' short names there), else "".
func localName(ref string) string {
	first, _, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ""
	}
	return "localhost/" + ref
}

// RemoveImage removes the image ref (the tag; the image too when no other
// tag names it): checkpoint.ErrNotFound when there is none,
// checkpoint.ErrInUse when a container uses it.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	_, err := r.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	if local := localName(ref); cerrdefs.IsNotFound(err) && local != "" {
		_, err = r.cli.ImageRemove(ctx, local, client.ImageRemoveOptions{PruneChildren: true})
	}
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("remove image %s: %w: %w", ref, checkpoint.ErrNotFound, err)
	case cerrdefs.IsConflict(err) || errorHas(err, "in use"):
		return fmt.Errorf("remove image %s: %w: %w", ref, checkpoint.ErrInUse, err)
	}
	return classify("remove image "+ref, err, nil)
}

// ImageExists says whether the engine has the image ref.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	_, err := r.inspectImage(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, classify("inspect image "+ref, err, nil)
	}
	return true, nil
}

// inspectImage inspects ref, or its localhost/ name on Podman.
func (r *Runtime) inspectImage(ctx context.Context, ref string) (client.ImageInspectResult, error) {
	img, err := r.cli.ImageInspect(ctx, ref)
	if local := localName(ref); cerrdefs.IsNotFound(err) && local != "" {
		img, err = r.cli.ImageInspect(ctx, local)
	}
	return img, err
}
