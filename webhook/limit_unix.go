//go:build unix

package webhook

import "syscall"

// cgroupOpenFlags open memory.max without following a link and without
// blocking on a FIFO planted there.
const cgroupOpenFlags = syscall.O_NONBLOCK | syscall.O_NOFOLLOW
