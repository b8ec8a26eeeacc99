//go:build unix && !linux

package statevol

import "golang.org/x/sys/unix"

// renameNoReplace has no atomic form off Linux: ENOSYS takes the caller's
// mkdir path. Off Linux the state volume is only read (restart-injector
// status and check on a laptop); its supervisors run on Linux nodes.
func renameNoReplace(from, to string) error { return unix.ENOSYS }
