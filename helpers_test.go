package sandboxagent

import (
	"os"
	"strconv"
)

func hostname() string  { h, _ := os.Hostname(); return h }
func itoa(n int) string { return strconv.Itoa(n) }
func osGetpid() int     { return os.Getpid() }
