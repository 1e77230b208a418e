package testenv

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// manifestTypes are the manifest media types a test registry is asked for
// (single-platform images, as the engines under test push them).
const manifestTypes = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"

// RegistryManifest reads the manifest a registry (Registry's address)
// serves for repo:tag straight over its HTTP API, bypassing every engine,
// and returns its bytes, media type and the registry's digest for it
// (Docker-Content-Digest).
func RegistryManifest(t testing.TB, addr, repo, tag string) (body []byte, mediaType, digest string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v2/"+repo+"/manifests/"+tag, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", manifestTypes)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET manifest %s:%s from %s: %s %v: %s", repo, tag, addr, resp.Status, err, body)
	}
	return body, resp.Header.Get("Content-Type"), resp.Header.Get("Docker-Content-Digest")
}

// PutRegistryManifest makes a registry serve a manifest under repo:tag
// (its blobs must already be in repo), as another client pushing there
// would, and returns the registry's digest for it.
func PutRegistryManifest(t testing.TB, addr, repo, tag string, body []byte, mediaType string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+addr+"/v2/"+repo+"/manifests/"+tag, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mediaType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT manifest %s:%s to %s: %s: %s", repo, tag, addr, resp.Status, out)
	}
	return resp.Header.Get("Docker-Content-Digest")
}
