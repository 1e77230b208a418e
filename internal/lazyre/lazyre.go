// Package lazyre is a regular expression compiled at its first use instead
// of at package init. Every command of the binary runs the init of every
// package it links, so patterns compiled there (counted repetitions such as
// {0,127} expand to hundreds of instructions) cost each start, `version`
// and `--help` included, though most commands never match them.
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a *regexp.Regexp compiled once, at the first call of any of
// its methods; it panics there, as regexp.MustCompile would have at init,
// when the pattern is invalid. Safe for concurrent use.
type Regexp struct {
	pattern string
	once    sync.Once
	re      *regexp.Regexp
}

// New returns a Regexp for pattern without compiling it.
func New(pattern string) *Regexp { return &Regexp{pattern: pattern} }

// Get compiles the pattern the first time and returns it.
func (r *Regexp) Get() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.pattern) })
	return r.re
}

// String is the source pattern (no compilation).
func (r *Regexp) String() string { return r.pattern }

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.Get().MatchString(s) }

// Split is regexp.Regexp.Split.
func (r *Regexp) Split(s string, n int) []string { return r.Get().Split(s, n) }

// FindStringIndex is regexp.Regexp.FindStringIndex.
func (r *Regexp) FindStringIndex(s string) []int { return r.Get().FindStringIndex(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.Get().FindStringSubmatch(s) }
