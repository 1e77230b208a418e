package catalog

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
)

// digests.json holds the digests of the released images, written by
// .ci/release.sh after it pushed them and compiled in like versions.json:
// {"<tag>": "sha256:<hex>"}. A key is the tag part of the reference
// ("pi-0.73.1-20261129"), not the whole reference, so that the released
// images copied unchanged to another repository (image_name) verify too.
// The committed file is {}: a development build has nothing recorded.
//
//go:embed digests.json
var digestsJSON []byte

var (
	// A manifest digest as registries and engines print it.
	digestRe = newLazyRE(`^sha256:[0-9a-f]{64}$`)
	// A tag (the part after the colon of a reference).
	tagRe = newLazyRE(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// ParseDigests parses and validates a digests.json document: a JSON object
// mapping image tags to sha256 manifest digests.
func ParseDigests(data []byte) (map[string]string, error) {
	var m map[string]string
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("digests.json: %w", err)
	}
	if m == nil {
		return nil, fmt.Errorf("digests.json: want an object {\"<tag>\": \"sha256:…\"}, got null")
	}
	if dec.More() {
		return nil, fmt.Errorf("digests.json: more than one JSON value")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !tagRe.MatchString(k) {
			return nil, fmt.Errorf("digests.json: %q is not an image tag (the part after the colon, e.g. pi-0.73.1-20261129)", k)
		}
		if !digestRe.MatchString(m[k]) {
			return nil, fmt.Errorf("digests.json: %s: %q is not a digest sha256:<64 hex digits>", k, m[k])
		}
	}
	return m, nil
}

var embeddedDigests func() (map[string]string, error)

func init() { resetDigests() }

// resetDigests (re)arms the one-time parse of digestsJSON (tests swap it).
func resetDigests() {
	embeddedDigests = sync.OnceValues(func() (map[string]string, error) {
		return ParseDigests(digestsJSON)
	})
}

// ReleasedDigests returns the image digests recorded at release in this
// binary (digests.json), keyed by tag; empty in a development build. An
// invalid embedded file is a build defect (the tests catch it) and panics.
func ReleasedDigests() map[string]string {
	m, err := embeddedDigests()
	if err != nil {
		panic("catalog: embedded " + err.Error())
	}
	return maps.Clone(m)
}

// ReleasedDigest returns the digest recorded at release for an image: ref
// is a reference (registry.example.com/x/sandbox-agent:pi-0.73.1-20261129)
// or a bare tag (pi-0.73.1-20261129); the lookup uses its tag. A reference
// without a tag, or a tag nothing was recorded for, returns false.
func ReleasedDigest(ref string) (string, bool) {
	tag, ok := refTag(ref)
	if !ok {
		return "", false
	}
	d, ok := ReleasedDigests()[tag]
	return d, ok
}

// refTag returns the tag of an image reference, or ref itself when it is a
// bare tag. A digest reference has no tag.
func refTag(ref string) (string, bool) {
	if strings.Contains(ref, "@") {
		return "", false
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[i+1:]
	} else if strings.Contains(ref, "/") {
		return "", false // a repository without a tag
	}
	return ref, tagRe.MatchString(ref)
}
