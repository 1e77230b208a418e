package images

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"
)

// ClientEngine implements Engine over the Docker Engine API client. Builds
// use the classic builder (BuilderV1): it needs no BuildKit session and
// works with every engine from API 1.41 (Docker 20.10) on, and with
// Podman's compatible API.
type ClientEngine struct {
	c *client.Client
	// DockerConfig is the directory holding config.json with registry
	// credentials; "" means $DOCKER_CONFIG, else ~/.docker.
	DockerConfig string
}

// NewEngine returns an Engine over c (e.g. (*docker.Runtime).Client()).
func NewEngine(c *client.Client) *ClientEngine { return &ClientEngine{c: c} }

// ImageExists reports whether ref is in the engine's image store.
func (e *ClientEngine) ImageExists(ctx context.Context, ref string) (bool, error) {
	_, err := e.c.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, err
}

// Build runs one classic-builder build and checks the tag exists after.
func (e *ClientEngine) Build(ctx context.Context, req BuildRequest, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	args := make(map[string]*string, len(req.BuildArgs))
	for k, v := range req.BuildArgs {
		args[k] = &v
	}
	res, err := e.c.ImageBuild(ctx, bytesReader(req.Context), client.ImageBuildOptions{
		Tags:        []string{req.Tag},
		Dockerfile:  req.Dockerfile,
		BuildArgs:   args,
		Labels:      req.Labels,
		NoCache:     req.NoCache,
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if err := decodeStream(res.Body, progress); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ok, err := e.ImageExists(ctx, req.Tag)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the engine reported no error but %s does not exist after the build", req.Tag)
	}
	return nil
}

// Push pushes ref, with credentials from the Docker config file when it
// has any for ref's registry.
func (e *ClientEngine) Push(ctx context.Context, ref string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	auth, host, err := e.registryAuth(ref)
	if err != nil {
		return err
	}
	pushAuth := auth
	if pushAuth == "" {
		// Docker 20.10 refuses a push without the header ("Bad parameters
		// and missing X-Registry-Auth"): send empty credentials, as the
		// docker CLI does.
		pushAuth = emptyAuth
	}
	resp, err := e.c.ImagePush(ctx, ref, client.ImagePushOptions{RegistryAuth: pushAuth})
	if err != nil {
		return authHint(err, host, auth)
	}
	defer resp.Close()
	if err := decodeStream(resp, progress); err != nil {
		var be *BuildError
		if errors.As(err, &be) {
			// A push has no steps; keep the message only.
			err = errors.New(be.Message)
		}
		return authHint(err, host, auth)
	}
	return nil
}

// RegistryHas asks the engine to look ref up in its registry
// (DistributionInspect, see RegistryDigest). Not found is false; an
// unreachable registry, refused credentials or an engine without
// DistributionInspect (Podman) is an error.
func (e *ClientEngine) RegistryHas(ctx context.Context, ref string) (bool, error) {
	d, err := e.RegistryDigest(ctx, ref)
	return d != "", err
}

func authHint(err error, host, auth string) error {
	if err == nil {
		return nil
	}
	msg := strings.ToLower(err.Error())
	if cerrdefs.IsUnauthorized(err) || cerrdefs.IsPermissionDenied(err) ||
		strings.Contains(msg, "unauthorized") || strings.Contains(msg, "denied") ||
		strings.Contains(msg, "authentication required") {
		if auth == "" {
			return fmt.Errorf("%w (no credentials for %s in the Docker config file: run `docker login %s`, or add an \"auths\" entry or a credential helper to ~/.docker/config.json)", err, host, host)
		}
		return fmt.Errorf("%w (the credentials for %s in the Docker config file were refused)", err, host)
	}
	return err
}

// dockerConfigFile is the subset of ~/.docker/config.json that is read.
type dockerConfigFile struct {
	CredsStore  string            `json:"credsStore"`
	CredHelpers map[string]string `json:"credHelpers"`
	Auths       map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
	} `json:"auths"`
}

// registryAuth returns the encoded X-Registry-Auth value for ref's
// registry from the Docker config file ("" when it has none) and the
// registry host. A missing config file is not an error.
func (e *ClientEngine) registryAuth(ref string) (string, string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	host := reference.Domain(named)
	dir := e.DockerConfig
	if dir == "" {
		dir = os.Getenv("DOCKER_CONFIG")
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", host, nil
		}
		dir = filepath.Join(home, ".docker")
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", host, nil
	}
	if err != nil {
		return "", host, fmt.Errorf("docker config: %w", err)
	}
	var cfg dockerConfigFile
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", host, fmt.Errorf("docker config %s: %w", filepath.Join(dir, "config.json"), err)
	}
	if helper := cfg.CredHelpers[host]; helper != "" || cfg.CredsStore != "" {
		if helper == "" {
			helper = cfg.CredsStore
		}
		ac, ok, err := credentialHelper(helper, host)
		if err != nil {
			return "", host, err
		}
		if ok {
			buf, err := json.Marshal(ac)
			if err != nil {
				return "", host, err
			}
			return base64.URLEncoding.EncodeToString(buf), host, nil
		}
	}
	keys := []string{host, "https://" + host, "http://" + host, "https://" + host + "/v1/", "https://" + host + "/v2/"}
	if host == "docker.io" {
		keys = append(keys, "https://index.docker.io/v1/", "index.docker.io")
	}
	for _, k := range keys {
		a, ok := cfg.Auths[k]
		if !ok {
			continue
		}
		ac := registry.AuthConfig{ServerAddress: host, Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return "", host, fmt.Errorf("docker config: auth for %s is not base64: %w", k, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return "", host, fmt.Errorf("docker config: auth for %s is not user:password", k)
			}
			ac.Username, ac.Password = user, pass
		}
		if ac.Username == "" && ac.Password == "" && ac.IdentityToken == "" {
			continue
		}
		buf, err := json.Marshal(ac)
		if err != nil {
			return "", host, err
		}
		return base64.URLEncoding.EncodeToString(buf), host, nil
	}
	return "", host, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// credentialHelper asks docker-credential-NAME for host's credentials, as
// the Docker CLI does (stdin: the server URL; stdout: JSON). A helper
// that is not installed, or has nothing for host, is "none".
func credentialHelper(name, host string) (registry.AuthConfig, bool, error) {
	if strings.ContainsAny(name, "/\\ ") {
		return registry.AuthConfig{}, false, fmt.Errorf("docker config: credential helper %q", name)
	}
	bin, err := exec.LookPath("docker-credential-" + name)
	if err != nil {
		return registry.AuthConfig{}, false, nil
	}
	server := host
	if host == "docker.io" {
		server = "https://index.docker.io/v1/"
	}
	// A helper may wait on a locked keychain or gpg: bounded.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "get")
	cmd.Stdin = strings.NewReader(server)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(string(out) + stderr.String()); strings.Contains(strings.ToLower(msg), "credentials not found") {
			return registry.AuthConfig{}, false, nil
		}
		// stdout is not shown: it could hold a secret.
		return registry.AuthConfig{}, false, fmt.Errorf("docker-credential-%s get %s: %w: %s", name, server, err, truncate(strings.TrimSpace(stderr.String()), 300))
	}
	var c struct{ Username, Secret string }
	if err := json.Unmarshal(out, &c); err != nil {
		return registry.AuthConfig{}, false, fmt.Errorf("docker-credential-%s: %w", name, err)
	}
	ac := registry.AuthConfig{ServerAddress: host, Username: c.Username, Password: c.Secret}
	if c.Username == "<token>" {
		ac = registry.AuthConfig{ServerAddress: host, IdentityToken: c.Secret}
	}
	return ac, c.Secret != "", nil
}
