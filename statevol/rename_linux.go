//go:build unix

package statevol

import "golang.org/x/sys/unix"

// renameNoReplace moves from to to unless to exists (EEXIST).
func renameNoReplace(from, to string) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
}
