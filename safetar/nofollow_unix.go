//go:build unix

package safetar

import "syscall"

// oNoFollow makes opening a symlink as the final component fail.
const oNoFollow = syscall.O_NOFOLLOW
