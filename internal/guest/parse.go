package guest

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

// Counts are the sandbox cgroup's counters Counters prints: how often the
// OOM killer struck and how many forks the pids limit refused.
type Counts struct {
	OOMKills  int64
	PidsLimit int64 // refused forks
}

// ParseCounters reads Counters' output; lines it cannot read count as
// nothing.
func ParseCounters(b []byte) (ev Counts) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		switch k {
		case "oom":
			ev.OOMKills = n
		case "pids":
			ev.PidsLimit = n
		}
	}
	return ev
}

// Value finds the "KEY N" line of ProcessScan's output ("current",
// "refused"); -1 when there is none.
func Value(out, key string) int64 {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				return n
			}
		}
	}
	return -1
}

// Groups counts processes per process group in /proc/PID/stat
// lines, leaving out the container's main session (sid 0 or 1: init and
// the keepalive).
func Groups(out string) map[int]int {
	g := map[int]int{}
	for _, line := range strings.Split(out, "\n") {
		// "pid (comm) state ppid pgrp session ..."; comm may hold
		// spaces and parentheses: fields start after the last ')'.
		i := strings.LastIndexByte(line, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i+1:])
		if len(f) < 4 {
			continue
		}
		pgrp, err1 := strconv.Atoi(f[2])
		sid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || pgrp <= 1 || sid <= 1 {
			continue
		}
		g[pgrp]++
	}
	return g
}

// FirstSession is the session of the earliest started process but pid 1
// in /proc/PID/stat lines (-1 when none says when it started). Behind an
// init that is the keepalive, which started before any exec: under
// Kubernetes' pause process it leads a session (and group) of its own,
// not init's.
func FirstSession(out string) int {
	sid, first := -1, uint64(0)
	for _, line := range strings.Split(out, "\n") {
		head, _, _ := strings.Cut(line, " (")
		i := strings.LastIndexByte(line, ')')
		pid, err := strconv.Atoi(head)
		if i < 0 || err != nil || pid <= 1 {
			continue
		}
		// starttime is field 22 of the line, the 20th after comm.
		f := strings.Fields(line[i+1:])
		if len(f) < 20 {
			continue
		}
		n, err1 := strconv.Atoi(f[3])
		st, err2 := strconv.ParseUint(f[19], 10, 64)
		if err1 == nil && err2 == nil && (sid < 0 || st < first) {
			sid, first = n, st
		}
	}
	return sid
}

// Listeners reads AdoptSettle's "listen PORT UID" lines (PORT in hex, as
// /proc/net/tcp has it): the uid of each port's listener, on any address.
// A port with listeners of several uids keeps one that is not root's: the
// sandbox's user can add lines of its own to the output, never remove one.
func Listeners(out []byte) map[int]int {
	l := map[int]int{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "listen" {
			continue
		}
		port, err1 := strconv.ParseUint(f[1], 16, 16)
		uid, err2 := strconv.ParseUint(f[2], 10, 31)
		if err1 != nil || err2 != nil || port == 0 {
			continue
		}
		if prev, seen := l[int(port)]; !seen || prev == 0 {
			l[int(port)] = int(uid)
		}
	}
	return l
}
