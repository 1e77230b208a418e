package catalog

import (
	"regexp"
	"sync"
)

// lazyRE is a regexp compiled at its first use, not at init: every command
// of the binary runs this package's init, few match a tag or a version.
// (internal/lazyre does the same, but the catalog imports nothing of the
// module.) An invalid pattern panics at the first use.
type lazyRE struct{ get func() *regexp.Regexp }

func newLazyRE(pattern string) lazyRE {
	return lazyRE{sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(pattern) })}
}

// MatchString is regexp.Regexp.MatchString.
func (r lazyRE) MatchString(s string) bool { return r.get().MatchString(s) }
